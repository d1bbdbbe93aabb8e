"""EcStoreConnector against the real vLLM 0.33.0 with a sick daemon: hung (SIGSTOP), dead
(SIGKILL), restarted, and slowed (a proxy that holds every chunk it forwards). The
scheduler-side hooks never wait on it: each call's time stays under a bound far below any
store call's timeout -- a bound on blocking, not a speed -- the requests that needed the
store see misses (the encoder computes them), and hits come back once the daemon does,
without a new connector."""

import signal
import socket
import subprocess
import threading
import time

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole  # noqa: E402

import ecstore  # noqa: E402
from conftest import start_serve  # noqa: E402
from ecstore.vllm import EcStoreConnector  # noqa: E402
from test_vllm_connector import MockRequest, ask_until_ready, make_config  # noqa: E402

BOUND_S = 0.025  # a scheduler hook's longest call; a store call's timeout here is 2 s


def start_daemon(directory, port=0):
    proc, _, port = start_serve(directory, port=port, stderr=subprocess.DEVNULL)
    return proc, port


def schedule(sched, req_id, keys, hit_key="a", deadline_s=5):
    """Asks as vLLM does, once a step, until the request is ready; (the longest hook call,
    whether `hit_key` is a hit)."""
    req = MockRequest(req_id, keys, [64] * len(keys))
    longest, start = 0.0, time.monotonic()
    while True:
        t = time.monotonic()
        ready = sched.ensure_cache_available(req, 0)
        longest = max(longest, time.monotonic() - t)
        if ready:
            break
        assert time.monotonic() - start < deadline_s, "the request waited past the budget"
        time.sleep(0.001)
    t = time.monotonic()
    hit = sched.has_cache_item(hit_key)
    sched.request_finished(req)
    return max(longest, time.monotonic() - t), hit


def test_a_hung_dead_or_restarted_daemon_costs_misses_never_a_scheduler_stall(tmp_path, caplog):
    proc, port = start_daemon(tmp_path / "d")
    addr = f"tcp://127.0.0.1:{port}"
    # A budget a sanitized daemon answers a healthy lookup within; the hooks never wait on it.
    extra = {"lookup_budget_ms": 1000, "timeout_ms": 2000, "retries": 0}
    producer = EcStoreConnector(make_config("ecstore", addr, True, False, extra),
                                ECConnectorRole.WORKER)
    sched = EcStoreConnector(make_config("ecstore", addr, False, True, extra),
                             ECConnectorRole.SCHEDULER)
    try:
        producer.save_caches(encoder_cache={"a": torch.ones(64, 64)}, mm_hash="a")
        producer.wait_for_saves()
        longest, hit = schedule(sched, "healthy", ["a", "b"])
        assert hit
        held = MockRequest("held", ["a"], [64])
        assert ask_until_ready(sched, held) and sched.has_cache_item("a")  # pinned
        proc.send_signal(signal.SIGSTOP)
        t = time.monotonic()
        sched.request_finished(held)  # its pin is released off the scheduler thread
        assert time.monotonic() - t < BOUND_S
        longest, hit = schedule(sched, "hung", ["a", "b"])
        assert not hit  # a miss: the encoder computes it
        assert longest < BOUND_S, f"a hook call took {longest * 1e3:.1f} ms, the daemon hung"
        proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while not schedule(sched, "resumed", ["a"])[1]:  # the late answers drain; hits again
            assert time.monotonic() < deadline, "no hit after the daemon came back"
        proc.kill()
        proc.wait()
        longest, hit = schedule(sched, "dead", ["a"])
        assert not hit and longest < BOUND_S, f"{longest * 1e3:.1f} ms with the daemon dead"

        # Restarted on its address: the same connector finds its entries again.
        proc, _ = start_daemon(tmp_path / "d", port)
        with ecstore.connect(addr) as c:
            c.put("test", "a", torch.ones(64, 64))
        deadline = time.monotonic() + 10
        while True:
            longest, hit = schedule(sched, "restarted", ["a"])
            assert longest < BOUND_S, f"{longest * 1e3:.1f} ms while the daemon restarted"
            if hit:
                break
            assert time.monotonic() < deadline, "no hit after the daemon restarted"
        # The engine's log says it once each way per outage (hung; dead until restarted),
        # naming the store, however many asks failed meanwhile.
        said = [r.getMessage() for r in caplog.records if r.name == "ecstore.lookups"]
        failing = [m for m in said if "are failing" in m]
        again = [m for m in said if "answer again" in m]
        assert 2 <= len(failing) == len(again) <= 4 and addr in failing[0], said
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        for c in (producer, sched):
            c.shutdown()


class SlowProxy:
    """A TCP proxy to a daemon that holds every chunk it forwards for `delay_s`: a slow link
    or an overloaded daemon, not a dead one."""

    def __init__(self, port, delay_s):
        self._port, self._delay = port, delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self._port))
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while chunk := src.recv(1 << 16):
                time.sleep(self._delay)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self._closed = True
        self._listener.close()


def test_a_slowed_daemon_costs_misses_never_a_scheduler_stall(daemon):
    port = int(daemon["tcp"].rsplit(":", 1)[1])
    with ecstore.connect(daemon["tcp"]) as c:
        c.put("test", "a", torch.ones(64, 64))
    proxy = SlowProxy(port, 0.1)  # every lookup takes two held chunks: past the budget
    extra = {"transport": "tcp", "lookup_budget_ms": 50, "timeout_ms": 2000}
    sched = EcStoreConnector(make_config("ecstore", f"tcp://127.0.0.1:{proxy.port}", False,
                                         True, extra), ECConnectorRole.SCHEDULER)
    try:
        times = []
        for i in range(20):
            longest, hit = schedule(sched, f"slow{i}", ["a", "b"])
            times.append(longest)
            assert not hit  # past the budget: computed
        times.sort()
        p99 = times[min(len(times) - 1, len(times) * 99 // 100)]
        assert p99 < BOUND_S, f"hook p99 {p99 * 1e3:.1f} ms with the daemon slowed"
        stats = sched.get_ec_connector_stats().reduce()
        assert stats["misses_timeout"] == 40 and stats["lookup_timeouts"] == 20
    finally:
        sched.shutdown()
        proxy.close()


def test_an_engine_started_before_its_daemon_misses_until_it_answers(tmp_path):
    """fail_open (the default): an engine unit up before ec-store.service builds its
    connectors, sees misses, and hits once the daemon answers -- no restart."""
    directory = tmp_path / "d"
    addr = f"unix:{directory / 'serve.sock'}"
    extra = {"lookup_budget_ms": 1000, "timeout_ms": 2000, "retries": 0}
    producer = EcStoreConnector(make_config("ecstore", addr, True, False, extra),
                                ECConnectorRole.WORKER)
    sched = EcStoreConnector(make_config("ecstore", addr, False, True, extra),
                             ECConnectorRole.SCHEDULER)
    proc = None
    try:
        longest, hit = schedule(sched, "before", ["a"])
        assert not hit and longest < BOUND_S
        with pytest.raises(ecstore.Unavailable):
            ecstore.connect(addr)  # nothing there yet: the connector made no connection
        proc, _ = start_daemon(directory)
        deadline = time.monotonic() + 10
        while True:
            producer.save_caches(encoder_cache={"a": torch.ones(64, 64)}, mm_hash="a")
            producer.wait_for_saves()
            if schedule(sched, "after", ["a"])[1]:
                break
            assert time.monotonic() < deadline, "no hit after the daemon came up"
            time.sleep(0.2)
        with ecstore.connect(addr) as c:
            assert c.contains(sched.namespace, "a")
    finally:
        producer.shutdown()
        sched.shutdown()
        if proc:
            proc.kill()
            proc.wait()
