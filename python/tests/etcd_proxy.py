"""A TCP proxy between a cluster node or client and etcd that the tests switch: forwarding,
delaying etcd's answers (a lagging view), holding the connections already open (a watch that
hangs while new requests pass), or holding everything (a partition: connections open and
stay silent, as a black-holed network does).

    p = EtcdProxy(etcd.client)           # then --cluster p.uri("c1")
    p.drop(); ...; p.heal()
"""
import collections
import socket
import threading
import time


class EtcdProxy:
    def __init__(self, target_port):
        self.target = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.cv = threading.Condition()
        self.dropped, self.lag, self.closed = False, 0.0, False
        self.frozen = set()  # connections held (by id) while new ones pass
        self.conns = {}
        threading.Thread(target=self._accept, daemon=True).start()

    def uri(self, name):
        return f"etcd://127.0.0.1:{self.port}/{name}"

    def drop(self):
        """Forward nothing, on every connection, open or new."""
        self._set(dropped=True)

    def delay(self, seconds):
        """etcd's answers (and watch events) reach the client `seconds` late."""
        self._set(lag=seconds)

    def freeze(self):
        """Hold the connections open now (a long watch among them); new ones pass."""
        with self.cv:
            self.frozen = set(self.conns)
            self.cv.notify_all()

    def heal(self):
        with self.cv:
            self.dropped, self.lag, self.frozen = False, 0.0, set()
            self.cv.notify_all()

    def close(self):
        self._set(closed=True)
        self.listener.close()
        for pair in list(self.conns.values()):
            for s in pair:
                try:
                    s.close()
                except OSError:
                    pass

    def _set(self, **kw):
        with self.cv:
            for k, v in kw.items():
                setattr(self, k, v)
            self.cv.notify_all()

    def _accept(self):
        n = 0
        while not self.closed:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            n += 1
            with self.cv:
                self.conns[n] = (c, u)
            threading.Thread(target=self._pump, args=(n, c, u, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(n, u, c, True), daemon=True).start()

    def _pump(self, conn, src, dst, answers):
        q = collections.deque()

        def read():
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                with self.cv:
                    q.append((time.monotonic(), data))
                    self.cv.notify_all()
                if not data:
                    return

        threading.Thread(target=read, daemon=True).start()
        while True:
            with self.cv:
                while True:
                    if self.closed:
                        return
                    held = self.dropped or conn in self.frozen
                    due = q[0][0] + (self.lag if answers else 0.0) if q else None
                    now = time.monotonic()
                    if not held and due is not None and now >= due:
                        _, data = q.popleft()
                        break
                    self.cv.wait(0.05 if due is None or held else max(0.001, due - now))
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
