"""The cluster's promise (docs/guarantees.md), on a real etcd and real nodes: once an erase or
a put is acknowledged, no client reads an erased entry or bytes older than that put --
through SIGKILL, SIGSTOP, clean stops, restarts with the same directory, joins and leaves.
An operation that cannot keep it fails instead (nothing acknowledged). Membership cannot be
taken over by accident: a live node's id is refused, a deleted record comes back."""
import contextlib
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import ecstore
from conftest import _ec_store_bin, start_serve
from test_cluster import TTL, Cluster, Etcd, _client, _etcd_put, _wait  # noqa: F401
from test_cluster import cluster, etcd  # noqa: F401 - the fixtures

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None,
                                reason="etcd is not installed (scripts/install-deps.sh "
                                       "installs etcd-server)")

N = 24  # keys per scenario: every node is some key's owner and some key's replica


def _v(i: int, version: int) -> np.ndarray:
    return np.frombuffer(f"{i:06d}v{version:03d}".encode() * 64, dtype=np.uint8).copy()


def _put_all(c, keys, version):
    for i, k in enumerate(keys):
        c.put("n", k, _v(i, version), dtype="U8", shape=[640])


def _version(c, i, k):
    """The version a read returns (None: a miss)."""
    try:
        got = bytes(c.get("n", k, like="numpy"))
    except ecstore.errors.NotFound:
        return None
    assert got[:6] == f"{i:06d}".encode(), got[:16]
    return int(got[7:10])


def _members(c):
    return sorted(n["id"] for n in c.cluster()["nodes"])


def _three(etcd, owner=None, **kw):
    """A client that sees the three nodes, N keys put at version 1, and those `owner` owns."""
    c = _client(etcd, **kw)
    assert _wait(lambda: len(_members(c)) == 3)
    keys = [f"img-{i}" for i in range(N)]
    _put_all(c, keys, 1)
    return c, keys, [k for k in keys if owner and c.owners("n", k)[0] == owner]


@contextlib.contextmanager
def _hung(cluster, node):
    pid = cluster.procs[node].pid
    os.kill(pid, signal.SIGSTOP)
    # Stopped once every thread is: until then a thread already running may still answer.
    assert _wait(lambda: _stopped(pid), 5), f"{node} did not stop"
    try:
        yield
    finally:
        os.kill(cluster.procs[node].pid, signal.SIGCONT)


def _stopped(pid):
    """Whether every thread of the process is stopped (state T in /proc/PID/task/*/stat)."""
    def state(tid):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:  # a thread that ended meanwhile
            return "T"
    return all(state(tid) in ("T", "t") for tid in os.listdir(f"/proc/{pid}/task"))


def _stop(cluster, node, how):
    p = cluster.procs[node]
    if how == "term":
        p.send_signal(signal.SIGTERM)
    else:
        p.kill()
    p.wait(timeout=30)


@pytest.mark.parametrize("how", ["term", "kill"])
def test_an_acknowledged_erase_stays_done_when_a_replica_comes_back(cluster, etcd, how):
    c, keys, _ = _three(etcd, replicas=2)
    _stop(cluster, "node-b", how)
    if how == "kill":
        # Still in the ring (its lease lives): an erase cannot reach every place of the key,
        # so it is not done -- and says so -- rather than leave a copy behind.
        with pytest.raises(ecstore.errors.Unavailable, match="not done"):
            c.erase_many("n", keys)
        assert _wait(lambda: "node-b" not in _members(c), TTL + 5)
    assert c.erase_many("n", keys) is not None
    assert all(_version(c, i, k) is None for i, k in enumerate(keys))
    cluster.start("node-b")  # the same id and directory, its erased copies on its disk
    assert _wait(lambda: "node-b" in _members(c))
    for reader in (c, _client(etcd)):
        assert [_version(reader, i, k) for i, k in enumerate(keys)] == [None] * N


def test_an_erase_while_the_owner_is_hung_fails_and_a_later_one_stays_done(cluster, etcd):
    c, keys, mine = _three(etcd, "node-a", timeout=1.0)
    with _hung(cluster, "node-a"):
        with pytest.raises(ecstore.errors.Unavailable, match="not done"):
            c.erase("n", mine[0])
    # Not acknowledged: the entry may still be read. Once an erase is, it stays done.
    assert _wait(lambda: _try_erase(c, mine), 10)
    time.sleep(TTL)  # past a lease's length: nothing brings them back
    assert all(_version(c, keys.index(k), k) is None for k in mine)


def _try_erase(c, keys):
    try:
        c.erase_many("n", keys)
        return True
    except ecstore.errors.Unavailable:
        return False


def test_a_replacing_put_while_the_owner_is_away_is_never_undone_by_its_return(cluster, etcd):
    away = "node-c"
    c, keys, mine = _three(etcd, away, timeout=1.0)
    assert mine
    _stop(cluster, away, "term")
    assert _wait(lambda: away not in _members(c))
    _put_all(c, keys, 2)  # acknowledged at the other nodes
    cluster.start(away)   # back with version 1 of its keys on disk
    assert _wait(lambda: away in _members(c))
    assert all(c.owners("n", k)[0] == away for k in mine)
    got = [_version(c, i, k) for i, k in enumerate(keys)]
    assert all(v in (2, None) for v in got), got  # never 1
    assert got.count(2) == N  # its keys read at their next place, where version 2 went


def test_a_put_while_the_owner_is_hung_is_not_acknowledged_and_never_shadowed(cluster, etcd):
    c, keys, mine = _three(etcd, "node-a", timeout=1.0)
    with _hung(cluster, "node-a"):
        with pytest.raises(ecstore.errors.Unavailable, match="not acknowledged"):
            c.put("n", mine[0], _v(keys.index(mine[0]), 2), dtype="U8", shape=[640])
    # Version 2 was not acknowledged: either may be read (once node-a answers again). Put
    # again, it is the only one.
    i = keys.index(mine[0])
    assert _wait(lambda: _version(c, i, mine[0]) in (1, 2), 10)
    assert _wait(lambda: _try_put(c, i, mine[0], 3), 10)
    assert all(_version(c, i, mine[0]) == 3 for _ in range(5))


def _try_put(c, i, k, version):
    try:
        c.put("n", k, _v(i, version), dtype="U8", shape=[640])
        return True
    except ecstore.errors.Unavailable:
        return False


def test_a_replacing_put_during_a_join_then_leave_never_reads_the_old_bytes(cluster, etcd):
    c = _client(etcd)
    assert _wait(lambda: len(_members(c)) == 3)
    keys = [f"img-{i}" for i in range(4 * N)]
    _put_all(c, keys, 1)
    cluster.start("node-d")
    assert _wait(lambda: len(_members(c)) == 4)
    _put_all(c, keys, 2)  # a quarter of them owned by node-d now
    _stop(cluster, "node-d", "term")
    assert _wait(lambda: len(_members(c)) == 3)
    got = [_version(c, i, k) for i, k in enumerate(keys)]
    assert 1 not in got, got
    assert got.count(2) >= 2 * N  # the keys node-d did not own were not moved


def test_a_second_node_with_a_live_id_is_refused_naming_the_first(cluster, etcd, tmp_path):
    c = _client(etcd)
    assert _wait(lambda: len(_members(c)) == 3)
    a = {n["id"]: n for n in c.cluster()["nodes"]}["node-a"]
    # --node-id given twice, and a copy of node-a's store directory (its id file with it).
    shutil.copytree(tmp_path / "node-a", tmp_path / "copy",
                    ignore=shutil.ignore_patterns("serve.sock", "*.lock"))
    for extra in (["--dir", str(tmp_path / "twin"), "--node-id", "node-a"],
                  ["--dir", str(tmp_path / "copy")]):
        proc = subprocess.run(
            [_ec_store_bin(), "serve", *extra, "--pool-size", "32MiB", "--listen",
             "127.0.0.1:0", "--cluster", etcd.uri("c1"), "--cluster-ttl", f"{TTL}s"],
            capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0, proc.stdout
        assert "node id node-a is in use" in proc.stderr and a["tcp"] in proc.stderr, proc.stderr
    # node-a is untouched: still a member, still serving.
    time.sleep(TTL)
    assert "node-a" in _members(c) and cluster.procs["node-a"].poll() is None


def test_a_node_whose_record_is_deleted_joins_again_without_what_it_held(cluster, etcd):
    c, keys, _ = _three(etcd)
    node = {n["id"]: n for n in c.cluster()["nodes"]}["node-b"]
    direct = ecstore.connect("tcp://" + node["tcp"])
    assert len(direct.list("n")) > 0
    _delete(etcd, "/ec-store/c1/nodes/node-b")
    # Out of the ring, then back within a keep-alive; what it held may have been replaced.
    assert _wait(lambda: "node-b" in _members(c) and not direct.list("n"), TTL + 5)
    direct.close()


def _delete(etcd, key):
    import base64
    import json
    import urllib.request
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{etcd.client}/v3/kv/deleterange",
                                 data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()


def test_a_hung_owner_on_this_host_costs_one_deadline_at_first_contact(cluster, etcd):
    probe = _client(etcd)
    assert _wait(lambda: len(_members(probe)) == 3)
    key = next(f"k{i}" for i in range(100) if probe.owners("n", f"k{i}")[0] == "node-a")
    with _hung(cluster, "node-a"):
        for call, deadline in (("get", 1.0), ("claim", 2.0)):
            c = _client(etcd, timeout=deadline)  # no connection to node-a yet
            t0 = time.monotonic()
            if call == "get":
                with pytest.raises(ecstore.errors.NotFound):
                    c.get("n", key, like="numpy")
            else:
                c.claim("n", key, ttl=5.0)
            took = time.monotonic() - t0
            assert took < deadline * 1.5, (call, took)  # one deadline, not unix then TCP


def _cv(k: int, seq: int) -> np.ndarray:
    return np.frombuffer(f"{k:04d}:{seq:08d};".encode() * 32, dtype=np.uint8).copy()


def test_a_node_refuses_a_put_of_a_key_it_does_not_hold_in_its_view(cluster, etcd):
    # A writer whose view lags (here: one that talks to the node directly) could otherwise
    # leave a copy on a node that is not one of the key's places, found by no drop and
    # served once the members change back.
    cluster.start("node-d")
    c = _client(etcd)
    assert _wait(lambda: len(_members(c)) == 4)
    nodes = {n["id"]: n for n in c.cluster()["nodes"]}
    key = "img-0"
    places = c.owners("n", key, 3)
    outsider = next(i for i in nodes if i not in places)
    direct = ecstore.connect("tcp://" + nodes[outsider]["tcp"])

    def refused():  # once the outsider sees the four members (a put before is dropped then)
        try:
            direct.put("n", key, _v(0, 1), dtype="U8", shape=[640])
            return False
        except ecstore.errors.Busy as e:
            assert "not one of the places of 'img-0'" in str(e), e
            return True

    assert _wait(refused)
    assert _wait(lambda: key not in [e.key for e in direct.list("n")])
    direct.close()
    c.put("n", key, _v(0, 2), dtype="U8", shape=[640])  # through the cluster: at its places
    assert _version(c, 0, key) == 2
