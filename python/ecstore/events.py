"""Where every entry is held, followed from the nodes' event streams (docs/events.md).

Each daemon started with ``--events`` publishes, in vLLM's KV-event framing (ZMQ PUB frames:
topic, 8-byte big-endian sequence number, msgpack ``[timestamp, [events], node]``), an event
for each copy stored or removed and ``EcCleared`` when it starts. A ``Subscriber`` follows
one or many nodes into an ``Index`` (key -> {node: {medium: bytes}}): a gap in a node's
sequence numbers is replayed from its ``--events-replay`` endpoint, and a subscriber that
starts late, or asks for batches no longer kept, takes a snapshot there. ``score`` tells a
router the bytes of a request's entries each candidate node already holds::

    sub = Subscriber(["tcp://node-a:5557"], ["tcp://node-a:5558"])
    while serving:
        sub.poll(timeout_ms=100)
        best = max(nodes, key=lambda n: score(sub.index, "vllm-qwen", mm_hashes, [n])[n])

Needs pyzmq and msgspec (both come with vLLM).
"""
from __future__ import annotations

import struct
from typing import Iterable, Optional, Sequence

import msgspec
import zmq

END, TOO_OLD = -1, -2


class Index:
    """(ns, key) -> {node: {medium: bytes}}, as the events say."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
        self._of: dict[str, set[tuple[str, str]]] = {}  # node -> its (ns, key)s

    def apply(self, event: list) -> None:
        kind = event[0]
        if kind == "EcStored":
            _, ns, keys, node, medium, nbytes = event[:6]
            for k in keys:
                self._at.setdefault((ns, k), {}).setdefault(node, {})[medium] = nbytes
                self._of.setdefault(node, set()).add((ns, k))
        elif kind == "EcRemoved":
            _, ns, keys, node, medium = event[:5]
            for k in keys:
                nodes = self._at.get((ns, k))
                if not nodes or node not in nodes:
                    continue
                nodes[node].pop(medium, None)
                if not nodes[node]:
                    self._drop(ns, k, node)
        elif kind == "EcCleared":
            self.forget(event[1])

    def _drop(self, ns: str, key: str, node: str) -> None:
        nodes = self._at[(ns, key)]
        del nodes[node]
        if not nodes:
            del self._at[(ns, key)]
        self._of[node].discard((ns, key))

    def forget(self, node: str) -> None:
        """Everything the index says `node` holds."""
        for ns, key in list(self._of.get(node, ())):
            self._drop(ns, key, node)

    def where(self, ns: str, key: str) -> dict[str, set[str]]:
        """The nodes holding the key and the media there."""
        return {n: set(m) for n, m in self._at.get((ns, key), {}).items()}

    def keys_at(self, node: str, ns: Optional[str] = None) -> set[str]:
        """The keys `node` holds in any medium (of namespace `ns`, or every namespace)."""
        return {k for n, k in self._of.get(node, ()) if ns is None or n == ns}

    def bytes_at(self, ns: str, key: str, node: str) -> int:
        media = self._at.get((ns, key), {}).get(node)
        return max(media.values()) if media else 0

    def __len__(self) -> int:
        return len(self._at)


def score(index: Index, ns: str, keys: Iterable[str], nodes: Sequence[str]) -> dict[str, int]:
    """For each candidate node, the bytes of `keys` it already holds (no encoder run, no
    transfer for those)."""
    keys = list(keys)
    return {n: sum(index.bytes_at(ns, k, n) for k in keys) for n in nodes}


def _key(text) -> bytes:
    """A Z85 CURVE key given as text or bytes, or read from a file (its first line)."""
    if isinstance(text, bytes):
        return text
    if len(text) != 40:
        with open(text, "rb") as f:
            return f.readline().strip()
    return text.encode()


class Subscriber:
    """Follows the publishers (one SUB socket each; `replays[i]` is publishers[i]'s replay
    endpoint, or None) into `index`. Call poll() from one thread.

    ``curve``: for nodes started with ``--events-key``, a dict of Z85 keys (or files holding
    them): ``server_key`` (the node's public key), ``public_key`` and ``secret_key`` (this
    subscriber's pair, from ``ec-store events-keys``; its public key is a ``curve=`` proof in
    the node's ACL, with the ``events`` right)."""

    def __init__(self, publishers: Sequence[str], replays: Optional[Sequence[Optional[str]]] = None,
                 topic: bytes = b"ec", index: Optional[Index] = None,
                 timeout_ms: int = 5000, curve: Optional[dict] = None) -> None:
        self.index = index if index is not None else Index()
        self.gaps = 0        # sequence gaps replayed
        self.snapshots = 0   # snapshots taken
        self._ctx = zmq.Context.instance()
        self._timeout = timeout_ms
        self._decode = msgspec.msgpack.Decoder().decode
        self._curve = {k: _key(v) for k, v in curve.items()} if curve else None
        self._subs = []
        for at in publishers:
            s = self._socket(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, topic)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(at)
            self._subs.append(s)
        self._replays = list(replays) if replays else [None] * len(self._subs)
        self._last: list[Optional[int]] = [None] * len(self._subs)
        self._node: list[Optional[str]] = [None] * len(self._subs)
        self._pending_snapshot: Optional[int] = None  # a start seen: its node's disk entries
        self._poller = zmq.Poller()
        for s in self._subs:
            self._poller.register(s, zmq.POLLIN)
        # Each (re)connection to a publisher with a replay endpoint is followed by a snapshot:
        # a quiet node is known from the start, and one that restarted while this socket was
        # away (its EcCleared sent before the socket was back) is known as it is now.
        self._monitors: dict = {}
        for i, s in enumerate(self._subs):
            if self._replays[i]:
                m = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
                self._monitors[m] = i
                self._poller.register(m, zmq.POLLIN)

    def _socket(self, kind):
        s = self._ctx.socket(kind)
        if self._curve:
            s.curve_serverkey = self._curve["server_key"]
            s.curve_publickey = self._curve["public_key"]
            s.curve_secretkey = self._curve["secret_key"]
        return s

    def node(self, i: int = 0) -> Optional[str]:
        """Publisher i's node name, once a batch of it has arrived."""
        return self._node[i]

    def close(self) -> None:
        for m, i in self._monitors.items():
            self._subs[i].disable_monitor()
            m.close()
        for s in self._subs:
            s.close()

    def poll(self, timeout_ms: int = 100) -> int:
        """Applies what has arrived (waiting up to timeout_ms for the first); the batches
        applied."""
        applied = 0
        ready = dict(self._poller.poll(timeout_ms))
        while ready:
            for m, i in self._monitors.items():
                if m in ready and self._connected(m):
                    self.snapshot(i)
            for i, s in enumerate(self._subs):
                if s in ready:
                    _, seq, payload = s.recv_multipart()
                    applied += self._arrived(i, struct.unpack(">q", seq)[0], payload)
            ready = dict(self._poller.poll(0))
        return applied

    @staticmethod
    def _connected(monitor) -> bool:
        """Whether the monitor told of a connection ready to receive (its handshake through,
        CURVE's or none)."""
        from zmq.utils.monitor import recv_monitor_message

        ready = False
        while monitor.poll(0):
            event = recv_monitor_message(monitor)["event"]
            ready |= event == zmq.EVENT_HANDSHAKE_SUCCEEDED
        return ready

    def snapshot(self, i: int = 0) -> None:
        """Publisher i's node as it is now: what it holds, and the stream from there on."""
        frames = self._request(i, b"snapshot")
        node = self._node[i]
        if node is not None:
            self.index.forget(node)
        for seq, payload in frames:
            self._apply(i, payload, forget=False)
            self._last[i] = seq
        self.snapshots += 1

    def replay(self, i: int, from_seq: int) -> list[tuple[int, bytes]]:
        """Publisher i's kept batches from from_seq on ([(TOO_OLD, b"")] where not kept)."""
        return self._request(i, struct.pack(">q", from_seq))

    def _arrived(self, i: int, seq: int, payload: bytes) -> int:
        last = self._last[i]
        if last is not None and seq <= last:
            return 0  # already in a replay or snapshot
        if last is None and seq > 1 and self._replays[i]:
            self.snapshot(i)  # started late: what the node holds, then the stream
            return self._arrived(i, seq, payload)
        if last is not None and seq > last + 1 and self._replays[i]:
            self.gaps += 1
            batches = self.replay(i, last + 1)
            if batches and batches[0][0] == TOO_OLD:
                self.snapshot(i)
                return self._arrived(i, seq, payload)
            for s, p in batches:
                if s < seq:
                    self._apply(i, p)
                    self._last[i] = s
        self._apply(i, payload)
        self._last[i] = max(self._last[i] or 0, seq)  # a snapshot it led to may be later
        return 1

    def _apply(self, i: int, payload: bytes, forget: bool = True) -> None:
        _, events, node = self._decode(payload)
        self._node[i] = node
        for e in events:
            self.index.apply(e)
            if e[0] == "EcCleared" and forget and self._replays[i]:
                # A start: the node's disk entries are still there; a snapshot tells them.
                self._pending_snapshot = i
        if self._pending_snapshot == i:
            self._pending_snapshot = None
            self.snapshot(i)

    def _request(self, i: int, body: bytes) -> list[tuple[int, bytes]]:
        at = self._replays[i]
        if not at:
            raise ValueError(f"publisher {i} has no replay endpoint: give replays=[...]")
        d = self._socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.setsockopt(zmq.RCVTIMEO, self._timeout)
        d.connect(at)
        try:
            d.send_multipart([b"", body])
            out = []
            while True:
                _, seq, payload = d.recv_multipart()
                s = struct.unpack(">q", seq)[0]
                if s == END:
                    return out
                out.append((s, payload))
        except zmq.Again:
            raise TimeoutError(f"no answer from {at} in {self._timeout} ms") from None
        finally:
            d.close()
