"""When in doubt, miss: the cluster's promise (docs/guarantees.md) tried as an outsider would,
on a real etcd with a proxy between each node or client and etcd that the tests switch --
a node cut off from etcd, a reader whose view lags or whose watch hangs, a leave and a
deleted record under a lagging reader, a node paused past its lease with requests queued in
its sockets, restarts at every offset of a killed node's lease, clean stops, hand-written
records -- and a history under all of them checked by a linearizability checker."""
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest

import ecstore
from conftest import _ec_store_bin, start_serve
from etcd_proxy import EtcdProxy
from linearizability import NEVER, Op, check
from test_cluster import TTL, Cluster, _client, _wait
from test_cluster import etcd  # noqa: F401 - the fixture
from test_cluster_promises import _cv, _delete, _hung, _members, _put_all, _stop, _v, _version

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None,
                                reason="etcd is not installed (scripts/install-deps.sh "
                                       "installs etcd-server)")

N = 48  # keys: a third or so owned by each node


class ProxiedCluster(Cluster):
    """Nodes that each reach etcd through a proxy of their own (self.proxies[node])."""

    def __init__(self, tmp_path, etcd, name):
        super().__init__(tmp_path, etcd, name)
        self.proxies = {}

    def start(self, node_id):
        p = self.proxies.setdefault(node_id, EtcdProxy(self.etcd.client))
        proc, _, port = start_serve(self.tmp / node_id, "--cluster", p.uri(self.name),
                                    "--node-id", node_id, "--cluster-ttl", f"{TTL}s",
                                    pool_size="32MiB", stderr=subprocess.DEVNULL)
        self.procs[node_id] = proc
        return port

    def stop_all(self):
        super().stop_all()
        for p in self.proxies.values():
            p.close()


@pytest.fixture
def proxied(tmp_path, etcd):  # noqa: F811
    c = ProxiedCluster(tmp_path, etcd, "c1")
    for n in ("node-a", "node-b", "node-c"):
        c.start(n)
    yield c
    c.stop_all()


def _via(proxy, timeout=2.0):
    c = ecstore.connect(proxy.uri("c1"), timeout=timeout, retries=0)
    assert _wait(lambda: len(_members(c)) == 3)
    return c


def _retry(fn, seconds=15):
    """fn() until it is acknowledged (not Unavailable or Busy): True, or False at the end."""
    return _wait(lambda: _acked(fn), seconds, every=0.1)


def _acked(fn):
    try:
        fn()
        return True
    except (ecstore.errors.Unavailable, ecstore.errors.Busy):
        return False


def _loaded(etcd, owner):  # noqa: F811
    w = _client(etcd, timeout=2.0)
    assert _wait(lambda: len(_members(w)) == 3)
    keys = [f"img-{i}" for i in range(N)]
    _put_all(w, keys, 1)
    mine = [k for k in keys if w.owners("n", k)[0] == owner]
    assert len(mine) >= 12, mine
    return w, keys, mine


def _replace_and_erase(w, keys, mine):
    """8 of `mine` put again at version 2 and 4 erased, each acknowledged (retried until)."""
    for k in mine[:8]:
        i = keys.index(k)
        assert _retry(lambda: w.put("n", k, _v(i, 2), dtype="U8", shape=[640])), k
    for k in mine[8:12]:
        assert _retry(lambda: w.erase("n", k)), k
    assert [_version(w, keys.index(k), k) for k in mine[:8]] == [2] * 8
    assert [_version(w, keys.index(k), k) for k in mine[8:12]] == [None] * 4


def _undone(reader, keys, mine):
    """The reads of the replaced and erased keys that return what was undone."""
    got = {k: _version(reader, keys.index(k), k) for k in mine[:12]}
    return {k: v for k, v in got.items()
            if (k in mine[:8] and v not in (2, None)) or (k in mine[8:12] and v is not None)}


def test_a_node_cut_off_from_etcd_refuses_and_no_reader_sees_an_undone_write(proxied, etcd):
    w, keys, mine = _loaded(etcd, "node-c")
    shared = proxied.proxies["node-c"]  # node-c and the reader reach etcd through it
    r = _via(shared)
    shared.drop()
    assert _wait(lambda: "node-c" not in _members(w), TTL + 10)
    _replace_and_erase(w, keys, mine)
    assert _undone(r, keys, mine) == {}
    # The nodes refused its view; reading the members again fails: it knows it is cut off.
    assert _wait(lambda: not r.cluster()["current"] and _undone(r, keys, mine) == {}, 10)
    tcp = next(n["tcp"] for n in r.cluster()["nodes"] if n["id"] == "node-c")
    direct = ecstore.connect("tcp://" + tcp, timeout=5.0, retries=0)
    with pytest.raises(ecstore.errors.Unavailable, match="refuses to serve"):
        direct.get("n", mine[12], like="numpy")
    time.sleep(2)
    assert _undone(r, keys, mine) == {}
    shared.heal()  # node-c joins again, without what it held
    assert _wait(lambda: "node-c" in _members(w) and r.cluster()["current"], 20)
    assert _wait(lambda: _undone(r, keys, mine) == {} and _version(r, 0, keys[0]) is not None)
    direct.close()


@pytest.mark.parametrize("how", ["term", "delete"])
def test_a_reader_whose_view_lags_sees_no_undone_write_through_a_leave(proxied, etcd, how):
    w, keys, mine = _loaded(etcd, "node-c")
    lagging = EtcdProxy(etcd.client)
    try:
        r = _via(lagging)
        lagging.delay(1.5)
        time.sleep(1.0)
        if how == "term":
            _stop(proxied, "node-c", "term")
        else:
            _delete(etcd, "/ec-store/c1/nodes/node-c")
        assert _wait(lambda: "node-c" not in _members(w), TTL + 5, every=0.01)
        undone = {}
        for k in mine[:8]:  # each read right after its put is acknowledged
            i = keys.index(k)
            assert _retry(lambda: w.put("n", k, _v(i, 2), dtype="U8", shape=[640])), k
            v = _version(r, i, k)
            if v not in (2, None):
                undone[k] = v
        assert undone == {}
        assert r.cluster()["current"]  # lagging, yet within the bound: it acted on its view
    finally:
        lagging.close()


def test_a_watch_that_hangs_is_noticed_and_followed_again(proxied, etcd):
    w, keys, mine = _loaded(etcd, "node-c")
    p = EtcdProxy(etcd.client)
    try:
        r = _via(p)
        time.sleep(1.0)  # its watch is open
        p.freeze()  # the watch's connection goes silent; new requests still pass
        proxied.proxies["node-c"].drop()  # node-c is cut off from etcd, and leaves
        assert _wait(lambda: "node-c" not in _members(w), TTL + 10)
        _replace_and_erase(w, keys, mine)
        assert _undone(r, keys, mine) == {}
        # The revision reads see the members changed: the watch is made again.
        assert _wait(lambda: "node-c" not in _members(r), 10)
        assert r.cluster()["current"]
        assert _undone(r, keys, mine) == {}
    finally:
        p.close()


def test_a_node_paused_past_its_lease_refuses_what_was_queued_in_its_sockets(proxied, etcd):
    w, keys, mine = _loaded(etcd, "node-a")
    tcp = next(n["tcp"] for n in w.cluster()["nodes"] if n["id"] == "node-a")
    direct = ecstore.connect("tcp://" + tcp, timeout=20.0, retries=0)
    answers = []

    def queued():
        for k in mine[:4]:
            try:
                answers.append(_version(direct, keys.index(k), k))
            except ecstore.errors.Unavailable as e:
                answers.append(str(e))

    with _hung(proxied, "node-a"):
        t = threading.Thread(target=queued)
        t.start()
        time.sleep(TTL + 1.0)  # its lease lapses; writers route around it
        assert _wait(lambda: "node-a" not in _members(w), TTL + 5)
        for k in mine[:4]:
            i = keys.index(k)
            assert _retry(lambda: w.put("n", k, _v(i, 2), dtype="U8", shape=[640])), k
    t.join(30)
    assert len(answers) == 4
    # Refused (its fence: no keep-alive acknowledged in time) or a miss after its drop:
    # never version 1, which version 2 replaced while it was paused.
    assert all(a is None or a == 2 or "refuses to serve" in str(a) for a in answers), answers
    assert _wait(lambda: "node-a" in _members(w), 20)
    assert all(_version(w, keys.index(k), k) in (2, None) for k in mine[:4])
    direct.close()


def test_a_restart_right_after_a_sigkill_starts_at_every_offset_of_the_old_lease(proxied, etcd):
    w = _client(etcd)
    assert _wait(lambda: len(_members(w)) == 3)
    for offset in [0.0, 1.0, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.2]:
        _stop(proxied, "node-a", "kill")
        time.sleep(offset)
        proxied.start("node-a")  # raises where it does not start
        assert _wait(lambda: "node-a" in _members(w), 10), offset
        assert _retry(lambda: _put_all(w, [f"k{offset}"], 1), 10)


def test_a_clean_stop_exits_0_idle_and_under_puts(proxied, etcd):
    w = _client(etcd, timeout=1.0)
    assert _wait(lambda: len(_members(w)) == 3)
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            _acked(lambda: w.put("n", f"k{i % 64}", _cv(i % 64, i), dtype="U8", shape=[448]))
            i += 1

    t = threading.Thread(target=load)
    t.start()
    try:
        for node in ("node-a", "node-b"):
            time.sleep(0.5)
            p = proxied.procs[node]
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=30) == 0, node
    finally:
        stop.set()
        t.join(30)
    p = proxied.procs["node-c"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0


def test_a_record_without_a_lease_is_no_member(proxied, etcd):
    import base64
    import json
    import urllib.request
    rec = json.dumps({"id": "node-z", "tcp": "127.0.0.1:9", "capacity": 1 << 40})
    body = json.dumps({"key": base64.b64encode(b"/ec-store/c1/nodes/node-z").decode(),
                       "value": base64.b64encode(rec.encode()).decode()}).encode()
    urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{etcd.client}/v3/kv/put", data=body,
        headers={"Content-Type": "application/json"}), timeout=5).read()
    w = _client(etcd)
    assert _wait(lambda: len(_members(w)) == 3)
    time.sleep(1)
    assert _members(w) == ["node-a", "node-b", "node-c"]
    _put_all(w, [f"img-{i}" for i in range(20)], 1)  # every put acknowledged


def test_evict_of_a_key_whose_owner_does_not_answer_fails_not_found_never(proxied, etcd):
    w, keys, mine = _loaded(etcd, "node-a")
    with _hung(proxied, "node-a"):
        out = subprocess.run([_ec_store_bin(), "--cluster", etcd.uri("c1"), "--timeout", "1s",
                              "evict", "-n", "n", mine[0]], capture_output=True, text=True,
                             timeout=60)
    assert out.returncode != 0
    assert "not done" in out.stderr and "not found" not in out.stderr, out.stderr
    # Not done: nothing is promised -- the entry, or a miss where the pause outlasted node-a's
    # lease and it dropped what it held.
    assert _version(w, keys.index(mine[0]), mine[0]) in (1, None)


class _Nemesis:
    """One fault at a time on one node or on the reader's link to etcd: SIGKILL and restart,
    SIGSTOP then SIGCONT, a clean stop and restart, node-d joining or leaving, a node cut off
    from etcd, the reader's view lagging by 1.5 s, the reader's watch hanging."""

    def __init__(self, cluster, reader_proxy, rng):
        self.cluster, self.reader_proxy, self.rng, self.log = cluster, reader_proxy, rng, []

    def one(self):
        node = self.rng.choice(["node-a", "node-b", "node-c"])
        kind = self.rng.choice(["kill", "stop", "term", "join", "partition", "lag", "hang"])
        self.log.append((round(time.monotonic(), 2), kind, node))
        hold = self.rng.uniform(0.3, 2.0 * TTL)
        if kind == "stop":
            with _hung(self.cluster, node):
                time.sleep(hold)
        elif kind in ("kill", "term"):
            _stop(self.cluster, node, kind)
            time.sleep(hold)
            self.cluster.start(node)
        elif kind == "partition":
            self.cluster.proxies[node].drop()
            time.sleep(hold)
            self.cluster.proxies[node].heal()
        elif kind in ("lag", "hang"):
            self.reader_proxy.delay(1.5) if kind == "lag" else self.reader_proxy.freeze()
            time.sleep(hold)
            self.reader_proxy.heal()
        elif "node-d" in self.cluster.procs and self.cluster.procs["node-d"].poll() is None:
            _stop(self.cluster, "node-d", "term")
        else:
            self.cluster.start("node-d")


def _history(proxied, etcd, seed, seconds):  # noqa: F811
    rng = random.Random(seed)
    writer = _client(etcd, timeout=1.0)
    reader_proxy = EtcdProxy(etcd.client)
    reader = _via(reader_proxy, timeout=1.0)
    assert _wait(lambda: len(_members(writer)) == 3)
    history = {f"key-{k}": [] for k in range(16)}
    nemesis, stop = _Nemesis(proxied, reader_proxy, rng), threading.Event()

    def faults():
        while not stop.is_set():
            nemesis.one()
            time.sleep(rng.uniform(0.2, 1.0))

    def read(c, key):
        t0 = time.monotonic()
        try:
            got = bytes(c.get("n", key, like="numpy"))
            value = int(got[5:13])
        except ecstore.errors.NotFound:
            value = None
        history[key].append(Op("get", value, t0, time.monotonic()))

    t = threading.Thread(target=faults, daemon=True)
    t.start()
    deadline, seq = time.monotonic() + seconds, 0
    try:
        while time.monotonic() < deadline:
            k = rng.randrange(16)
            key, op, t0 = f"key-{k}", rng.random(), time.monotonic()
            seq += 1
            try:
                if op < 0.45:
                    try:
                        writer.put("n", key, _cv(k, seq), dtype="U8", shape=[448])
                        history[key].append(Op("put", seq, t0, time.monotonic()))
                    except (ecstore.errors.Unavailable, ecstore.errors.Busy):
                        history[key].append(Op("put", seq, t0, NEVER))
                elif op < 0.6:
                    try:
                        writer.erase("n", key)
                        history[key].append(Op("erase", None, t0, time.monotonic()))
                    except ecstore.errors.NotFound:
                        history[key].append(Op("erase", None, t0, time.monotonic()))
                    except (ecstore.errors.Unavailable, ecstore.errors.Busy):
                        history[key].append(Op("erase", None, t0, NEVER))
                else:
                    read(reader if op < 0.8 else writer, key)
            except (ecstore.errors.Unavailable, ecstore.errors.Busy):
                pass  # a read that failed says nothing
    finally:
        stop.set()
        t.join(timeout=60)
        reader_proxy.heal()
    for key in history:  # and once more, every key, after the faults
        read(reader, key)
    reader_proxy.close()
    return history, nemesis.log


_SEEDS = [int(s) for s in os.environ.get("EC_CHAOS_SEEDS", "1,2,3").split(",")]


@pytest.mark.parametrize("seed", _SEEDS)
def test_a_history_under_partitions_pauses_lagging_views_and_churn_is_linearizable(
        proxied, etcd, seed):
    seconds = float(os.environ.get("EC_CHAOS_SECONDS", "15"))
    history, log = _history(proxied, etcd, seed, seconds)
    ops = [o for ops in history.values() for o in ops]
    acked = sum(o.kind != "get" and o.ret != NEVER for o in ops)
    hits = sum(o.kind == "get" and o.value is not None for o in ops)
    reads = sum(o.kind == "get" for o in ops)
    print(f"seed {seed}: {len(ops)} operations, {acked} acknowledged writes, "
          f"{hits} hits of {reads} reads, {len(log)} faults")
    assert check(history) is None, (check(history), log)
    assert acked > 50 and hits > 20 and len(log) >= 3, (acked, hits, log)
