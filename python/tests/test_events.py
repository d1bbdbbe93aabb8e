"""The entry events stream (docs/events.md) against a real daemon: every put, erase and
spill reaches a subscriber's index, which agrees with locate; a subscriber that starts late
converges through a snapshot; a replay from sequence 1 starts at the start's EcCleared;
a gap is replayed."""
import signal
import socket
import time

import numpy as np
import pytest

import ecstore
from conftest import _serve

zmq = pytest.importorskip("zmq", reason="pyzmq is not installed (vLLM brings it)")
pytest.importorskip("msgspec", reason="msgspec is not installed (vLLM brings it)")
from ecstore import events  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def daemon(tmp_path):
    pub, rep = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    for d in _serve(tmp_path, "--events", pub, "--events-replay", rep, "--node-id", "node-x",
                    "--metrics-listen", "127.0.0.1:0", pool_size="16MiB"):
        yield d, pub, rep


def _until(sub, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sub.poll(50)
        if cond():
            return True
    return cond()


def _fastest(where):
    """node -> the medium a read is served from (what locate tells), from the index."""
    order = ["device", "pool", "disk"]
    return {n: min(media, key=order.index) for n, media in where.items()}


def test_puts_erases_and_spills_reach_the_index_as_locate_sees_them(daemon):
    d, pub, rep = daemon
    sub = events.Subscriber([pub], [rep])
    time.sleep(0.3)  # a SUB socket misses what is sent before it is connected
    c = ecstore.connect(d["tcp"])
    keys = [f"img-{i}" for i in range(6)]
    for i, k in enumerate(keys):
        c.put("ns", k, np.full(1 << 20, i, dtype=np.uint8), dtype="U8", shape=[1 << 20])
    c.erase("ns", keys[0])
    c.flush()  # every entry gets a disk copy: EcStored disk

    def agrees():
        located = c.locate("ns", keys)
        return all(_fastest(sub.index.where("ns", k)) == {n or "node-x": m for n, m in at}
                   for k, at in zip(keys, located))

    assert _until(sub, agrees), [(sub.index.where("ns", k), c.locate("ns", [k])) for k in keys]
    assert sub.index.where("ns", keys[0]) == {}
    assert _until(sub, lambda: sub.index.where("ns", keys[1]).get("node-x", set()) >= {"disk"})
    assert events.score(sub.index, "ns", keys[1:3], ["node-x", "node-y"]) == \
        {"node-x": 2 << 20, "node-y": 0}
    # A subscriber that starts now converges through a snapshot.
    late = events.Subscriber([pub], [rep])
    time.sleep(0.3)
    c.put("ns", "after", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
    assert _until(late, lambda: late.index.where("ns", "after") != {})
    assert late.snapshots >= 1

    def same():  # both caught up with the same stream
        sub.poll(0)
        return all(late.index.where("ns", k) == sub.index.where("ns", k) for k in keys)

    assert _until(late, same), [(late.index.where("ns", k), sub.index.where("ns", k))
                                for k in keys]
    sub.close()
    late.close()
    c.close()


def test_a_replay_starts_at_the_starts_clear_and_a_gap_is_replayed(daemon):
    d, pub, rep = daemon
    c = ecstore.connect(d["tcp"])
    c.put("ns", "a", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
    sub = events.Subscriber([pub], [rep])
    batches = sub.replay(0, 1)  # from before this start: all of it, while it is all kept
    first = events.msgspec.msgpack.decode(batches[0][1])
    assert batches[0][0] > 1 and first[2] == "node-x"  # numbered from the start time in µs
    (kind, node, incarnation), = first[1]  # a start: its incarnation tells it from the last
    assert (kind, node) == ("EcCleared", "node-x") and incarnation > 0
    assert any(e[0] == "EcStored" and e[2] == ["a"]
               for _, p in batches for e in events.msgspec.msgpack.decode(p)[1])
    # Sequence numbers increase by one: a subscriber that lost some replays them.
    assert [s for s, _ in batches] == list(range(batches[0][0], batches[0][0] + len(batches)))
    time.sleep(0.3)
    # A batch after its SUB connected: the subscriber, started late, takes a snapshot.
    c.put("ns2", "nudge", np.zeros(16, dtype=np.uint8), dtype="U8", shape=[16])
    assert _until(sub, lambda: sub.index.where("ns", "a") != {})
    sub._last[0] -= 1  # as if the last batch had been lost at the high water mark
    sub.index.forget("node-x")
    c.put("ns", "b", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
    assert _until(sub, lambda: sub.index.where("ns", "b") != {})
    assert sub.gaps == 1
    sub.close()
    c.close()


def test_events_replay_without_events_is_a_clear_error(tmp_path):
    from conftest import start_serve
    with pytest.raises(RuntimeError, match="--events-replay needs --events"):
        start_serve(tmp_path / "s", "--events-replay", f"tcp://127.0.0.1:{_port()}")


def test_the_publishers_counts_are_on_metrics(daemon):
    import urllib.request

    d, pub, rep = daemon
    c = ecstore.connect(d["tcp"])
    for i in range(3):
        c.put("ns", f"m{i}", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
    events.Subscriber([pub], [rep]).replay(0, 1)

    def counts():
        text = urllib.request.urlopen(d["metrics"] + "/metrics", timeout=10).read().decode()
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith("ecstore_events_")}

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and counts().get("ecstore_events_total", 0) < 3:
        time.sleep(0.05)
    got = counts()
    assert got["ecstore_events_total"] >= 3 and got["ecstore_events_batches_total"] >= 2
    assert got["ecstore_events_replays_total"] >= 1
    c.close()


def test_a_subscriber_follows_a_daemon_through_a_restart(tmp_path):
    """The pool's copies are gone after a restart, the disk's stay: the index says so once
    the new start's first batch reaches it (numbered past the last start's: a gap, replayed
    from the start's EcCleared, then a snapshot)."""
    import signal
    from conftest import start_serve

    pub, rep = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    args = ("--events", pub, "--events-replay", rep, "--node-id", "node-r")
    proc, _, port = start_serve(tmp_path / "s", *args)
    sub = events.Subscriber([pub], [rep])
    try:
        time.sleep(0.3)
        c = ecstore.connect(f"tcp://127.0.0.1:{port}")
        for k in ("x", "y"):
            c.put("ns", k, np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
        c.flush()
        assert _until(sub, lambda: all(sub.index.where("ns", k) == {"node-r": {"pool", "disk"}}
                                       for k in ("x", "y")))
        c.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        proc, _, port = start_serve(tmp_path / "s", *args, port=port)
        c = ecstore.connect(f"tcp://127.0.0.1:{port}")
        time.sleep(0.3)
        c.put("ns", "z", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
        assert _until(sub, lambda: sub.index.where("ns", "z") != {} and all(
            sub.index.where("ns", k) == {"node-r": {"disk"}} for k in ("x", "y"))), \
            [sub.index.where("ns", k) for k in ("x", "y", "z")]
        c.close()
    finally:
        sub.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_with_an_acl_the_stream_asks_for_curve_and_a_principal_with_the_events_right(tmp_path):
    """Beside an ACL, --events without a key is refused at start; with one, a subscriber whose
    key the ACL gives the events right follows the node, while one without CURVE, one with an
    unknown key and one whose principal may only read get no batch and no snapshot."""
    import subprocess
    from conftest import _ec_store_bin, start_serve

    keys = tmp_path / "keys"
    keys.mkdir()
    ec = _ec_store_bin()
    pubkey = {}
    for who in ("node", "router", "reader", "stranger"):
        pubkey[who] = subprocess.run([ec, "events-keys", str(keys / who)], check=True,
                                     capture_output=True, text=True).stdout.strip()
    acl = tmp_path / "acl"
    acl.write_text(f"router curve={pubkey['router']} ns=* rights=events\n"
                   f"reader curve={pubkey['reader']} ns=* rights=read\n"
                   "# the daemon's own user, for the test's puts\n"
                   f"me uid={__import__('os').getuid()} ns=* rights=all\n")
    pub, rep = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    with pytest.raises(RuntimeError, match="--events-key"):
        start_serve(tmp_path / "s0", "--events", pub, "--acl-file", str(acl))
    for d in _serve(tmp_path, "--events", pub, "--events-replay", rep, "--acl-file", str(acl),
                    "--events-key", str(keys / "node.key"), pool_size="16MiB"):
        c = ecstore.connect(d["unix"])

        def follower(who):
            curve = None if who is None else {"server_key": pubkey["node"],
                                              "public_key": str(keys / f"{who}.pub"),
                                              "secret_key": str(keys / f"{who}.key")}
            return events.Subscriber([pub], [rep], curve=curve, timeout_ms=1500)

        subs = {who: follower(who) for who in ("router", "reader", "stranger", None)}
        time.sleep(0.5)
        for i in range(20):
            c.put("private-hospital", f"patient-{i}", np.full(4096, i, dtype=np.uint8),
                  dtype="U8", shape=[4096])
            for s in subs.values():
                s.poll(20)
        assert _until(subs["router"], lambda: len(subs["router"].index) == 20)
        for who in ("reader", "stranger", None):
            assert len(subs[who].index) == 0, who
            with pytest.raises(TimeoutError):
                subs[who].snapshot()
        for s in subs.values():
            s.close()


def test_an_oversized_replay_frame_is_dropped_before_it_is_buffered(daemon, tmp_path):
    """A 512 MiB frame on the replay socket: refused by size as it arrives (ZMQ_MAXMSGSIZE),
    so the daemon's memory hardly moves, and it goes on answering."""
    d, pub, rep = daemon
    pid = d["pid"]
    before = _rss_kib(pid)
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDTIMEO, 10000)
    s.connect(rep)
    big = bytearray(512 << 20)
    s.send_multipart([b"", big])
    del big
    time.sleep(2)
    grown = _rss_kib(pid) - before
    s.close()
    print(f"daemon RSS after a 512 MiB replay frame: +{grown / 1024:.1f} MiB")
    assert grown < 16 * 1024
    sub = events.Subscriber([pub], [rep])
    sub.snapshot()  # still answers
    sub.close()


def test_a_quiet_node_is_known_at_once_and_again_after_it_restarts(tmp_path):
    """A router started against a node that publishes nothing knows what it holds (a snapshot
    as its socket connects), and after the node is killed and restarted quietly, knows what
    it holds now: the pool copies that went with the process are gone from the index."""
    from conftest import start_serve

    pub, rep = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    args = ("--events", pub, "--events-replay", rep, "--node-id", "node-q")
    proc, _, port = start_serve(tmp_path / "q", *args, pool_size="16MiB")
    c = ecstore.connect(f"tcp://127.0.0.1:{port}")
    for i in range(4):
        c.put("ns", f"held-{i}", np.full(4096, i, dtype=np.uint8), dtype="U8", shape=[4096])
    c.flush()  # on disk too: what survives a restart
    c.put("ns", "pool-only", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
    c.close()
    time.sleep(0.3)  # quiet from here on
    sub = events.Subscriber([pub], [rep])
    try:
        assert _until(sub, lambda: len(sub.index) == 5), len(sub.index)
        proc.kill()
        proc.wait()
        proc, _, _ = start_serve(tmp_path / "q", *args, port=port, pool_size="16MiB")
        # Its pool went with the process; its disk entries came back. Nothing is published
        # after the start's EcCleared, which this socket may have missed.
        keys = [f"held-{i}" for i in range(4)] + ["pool-only"]

        def as_now():
            media = [sub.index.where("ns", k).get("node-q", set()) for k in keys]
            return all(m and "pool" not in m for m in media[:4]) and \
                "pool" not in media[4]

        assert _until(sub, as_now, 15), [sub.index.where("ns", k) for k in keys]
    finally:
        sub.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait()
