"""A cluster of `ec-store serve` nodes on a real etcd (loopback, a temp data dir): clients
that agree on every key's owner, batches split by owner, lost nodes as misses, a join that
keeps hits, etcd away without the data plane noticing, and the vLLM connector through it."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import ecstore
from conftest import _ec_store_bin, start_serve

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None,
                                reason="etcd is not installed (scripts/install-deps.sh "
                                       "installs etcd-server)")

TTL = 2  # seconds: each node's etcd lease


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """A one-member etcd on loopback, stoppable and restartable on the same ports and data."""

    def __init__(self, directory):
        self.dir, self.client, self.peer = directory, _port(), _port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["etcd", "--data-dir", str(self.dir), "--name", "default",
             "--listen-client-urls", f"http://127.0.0.1:{self.client}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.client}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{self.peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.client}/health", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    def uri(self, name: str) -> str:
        return f"etcd://127.0.0.1:{self.client}/{name}"


class Cluster:
    """Nodes of one cluster, each `ec-store serve --cluster` in its own directory."""

    def __init__(self, tmp_path, etcd, name):
        self.tmp, self.etcd, self.name, self.procs = tmp_path, etcd, name, {}

    def start(self, node_id):
        proc, _, port = start_serve(self.tmp / node_id, "--cluster", self.etcd.uri(self.name),
                                    "--node-id", node_id, "--cluster-ttl", f"{TTL}s",
                                    pool_size="32MiB", stderr=subprocess.DEVNULL)
        self.procs[node_id] = proc
        return port

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()


@pytest.fixture
def etcd(tmp_path):
    e = Etcd(tmp_path / "etcd")
    yield e
    if e.proc.poll() is None:
        e.proc.kill()
        e.proc.wait()


@pytest.fixture
def cluster(tmp_path, etcd):
    c = Cluster(tmp_path, etcd, "c1")
    for n in ("node-a", "node-b", "node-c"):
        c.start(n)
    yield c
    c.stop_all()


def _client(etcd, name="c1", timeout=5.0, **kw):
    """A cluster client; the deadline short only where a test is about it (a loaded machine,
    a sanitizer build, must not turn slow answers into misses elsewhere)."""
    c = ecstore.connect(etcd.uri(name), timeout=timeout, retries=0, **kw)
    _wait(lambda: len(c.cluster()["nodes"]) >= 1)
    return c


def _wait(cond, timeout=15.0, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return False


def _loaded(etcd, n_keys, **kw):
    """A client that sees the three nodes, and `n_keys` entries put through it."""
    c = _client(etcd, **kw)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    keys = [f"img-{i}" for i in range(n_keys)]
    _put(c, keys)
    return c, keys


def _value(i: int, n: int = 4096) -> np.ndarray:
    return np.frombuffer((f"{i:08d}".encode() * (n // 8 + 1))[:n], dtype=np.uint8).copy()


def _put(c, keys, ns="n"):
    for i, k in enumerate(keys):
        c.put(ns, k, _value(i), dtype="U8", shape=[4096])


def _hits(c, keys, ns="n"):
    return sum(g is not None for g in c.get_many(ns, keys, like="numpy"))


def test_clients_agree_on_owners_and_a_put_through_one_is_a_byte_exact_get_through_another(
        cluster, etcd, tmp_path):
    a = _client(etcd)
    assert _wait(lambda: len(a.cluster()["nodes"]) == 3)
    keys = [f"img-{i}" for i in range(60)]
    _put(a, keys)
    # Memory registered with the cluster is registered with each node's client (over RDMA
    # the NIC writes it; here nothing is bounced either way) and read into as any other.
    buf = np.zeros(4096, dtype=np.uint8)
    a.register_memory(buf)
    a.get_into("n", keys[7], buf)
    assert bytes(buf[:8]).decode() == "00000007"
    assert a.stats()["transfer"]["bounced_reads"] == 0
    a.unregister_memory(buf)
    # Another process, its own cluster client: the same owners, the same bytes.
    script = (
        "import ecstore, json, sys, numpy as np\n"
        "c = ecstore.connect(sys.argv[1], timeout=2.0)\n"
        "keys = [f'img-{i}' for i in range(60)]\n"
        "got = c.get_many('n', keys, like='numpy')\n"
        "print(json.dumps({'owners': [c.owners('n', k)[0] for k in keys],\n"
        "                  'bytes': [bytes(o[:8]).decode() for o in got],\n"
        "                  'hits': sum(g is not None for g in got)}))\n")
    run = subprocess.run([sys.executable, "-c", script, etcd.uri("c1")], capture_output=True,
                         text=True, env=os.environ)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["owners"] == [a.owners("n", k)[0] for k in keys]
    assert seen["hits"] == 60
    assert seen["bytes"] == [f"{i:08d}" for i in range(60)]
    # Each entry lies on its owner, and only there: the batch was split, not broadcast.
    by_node = {}
    for n in a.cluster()["nodes"]:
        direct = ecstore.connect("tcp://" + n["tcp"])
        by_node[n["id"]] = {e.key for e in direct.list("n")}
    assert all(by_node[a.owners("n", k)[0]] == by_node[a.owners("n", k)[0]] | {k} for k in keys)
    assert sum(len(v) for v in by_node.values()) == 60
    # Every node is on this host: reached through its socket and shared memory, not TCP.
    assert {n["transport"] for n in a.cluster()["nodes"]} == {"shm"}
    assert all(len(v) > 5 for v in by_node.values()), {k: len(v) for k, v in by_node.items()}
    # A second cluster on the same etcd sees none of it.
    other = Cluster(tmp_path, etcd, "c2")
    try:
        other.start("node-x")
        b = _client(etcd, "c2")
        assert [n["id"] for n in b.cluster()["nodes"]] == ["node-x"]
        assert _hits(b, keys) == 0
    finally:
        other.stop_all()


def test_a_killed_node_costs_misses_never_errors_and_comes_back_without_what_may_be_stale(
        cluster, etcd):
    c, keys = _loaded(etcd, 60, timeout=1.0)
    victim = "node-b"
    node = {n["id"]: n for n in c.cluster()["nodes"]}[victim]
    direct = ecstore.connect("tcp://" + node["tcp"])
    lost = sorted(e.key for e in direct.list("n"))  # its own keys (owned, and put there)
    kept = [k for k in keys if k not in lost]
    assert lost and all(c.owners("n", k)[0] == victim for k in lost)
    os.kill(cluster.procs[victim].pid, signal.SIGHUP)  # on its disk: a restart would have them
    assert _wait(lambda: direct.stats()["disk"]["entries"] == len(lost), 10)
    direct.close()
    cluster.procs[victim].kill()
    cluster.procs[victim].wait()
    t0 = time.monotonic()
    assert _hits(c, lost) == 0          # misses, within the deadline, not an exception
    assert time.monotonic() - t0 < 1.5
    assert _hits(c, kept) == len(kept)  # the rest of the cluster is unaffected
    with pytest.raises(ecstore.errors.NotFound):
        c.get("n", lost[0])
    assert c.cluster()["unavailable"] > 0
    # After the lease TTL no client routes to it: its keys' puts land elsewhere and hit.
    assert _wait(lambda: victim not in [n["id"] for n in c.cluster()["nodes"]], TTL + 3)
    assert victim not in c.owners("n", lost[0], 2)
    _put(c, lost[:3])
    assert _hits(c, lost[:3]) == 3
    # The same id and directory again, after its lease lapsed: the puts it missed may have
    # replaced what its disk holds, so it drops all of it (misses, never stale bytes).
    cluster.start(victim)
    assert _wait(lambda: victim in [n["id"] for n in c.cluster()["nodes"]])
    assert _hits(c, lost[:3]) == 3  # put while it was away: read at their next place
    assert _hits(c, lost[3:]) == 0


def test_a_hung_node_costs_at_most_the_deadline_and_the_rest_keep_hitting(cluster, etcd):
    c, keys = _loaded(etcd, 60, timeout=1.0)
    victim = "node-c"
    hung = [k for k in keys if c.owners("n", k)[0] == victim]
    rest = [k for k in keys if k not in hung]
    os.kill(cluster.procs[victim].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        got = c.get_many("n", [hung[0]], like="numpy")[0]
        # A miss -- or a hit at the key's next node, where a put that found the owner slow
        # (a loaded machine) went instead.
        assert got is None or bytes(got[:8]) == bytes(_value(keys.index(hung[0]))[:8])
        took = time.monotonic() - t0
        assert took < 1.0 * 1.1 + 0.2, took  # the 1 s deadline (plus the fallback's ask)
        t0 = time.monotonic()
        assert _hits(c, rest) == len(rest)
        assert time.monotonic() - t0 < 0.5  # the hung node is skipped, not waited on again
    finally:
        os.kill(cluster.procs[victim].pid, signal.SIGCONT)
    assert _wait(lambda: _hits(c, hung) == len(hung), 5)


def test_a_join_moves_about_a_quarter_of_the_keys_and_keeps_the_hit_rate(cluster, etcd):
    c = _client(etcd)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    keys = [f"img-{i}" for i in range(400)]
    before = {k: c.owners("n", k)[0] for k in keys}
    _put(c, keys[:300])  # the hot set; the last 100 are never put (true misses)
    hit_before = _hits(c, keys) / len(keys)
    cluster.start("node-d")
    assert _wait(lambda: len(c.cluster()["nodes"]) == 4)
    moved = [k for k in keys if c.owners("n", k)[0] != before[k]]
    assert all(c.owners("n", k)[0] == "node-d" for k in moved)  # only to the joiner
    share = len(moved) / len(keys)
    assert abs(share - 0.25) < 0.07, share  # 1/4 within a binomial tolerance (~3 sigma)
    hit_after = _hits(c, keys) / len(keys)
    assert hit_after >= hit_before - 0.05, (hit_before, hit_after)
    assert c.cluster()["fallback_hits"] > 0


def _healthz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(port, name):
    """The value of an unlabelled series on a daemon's /metrics (None where it is absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def test_with_etcd_away_everyone_misses_nothing_is_acknowledged_and_health_says_degraded(
        tmp_path, etcd):
    c1 = Cluster(tmp_path, etcd, "c1")
    metrics, tcp = {}, {}
    try:
        for n in ("node-a", "node-b"):
            proc, line, port = start_serve(tmp_path / n, "--cluster", etcd.uri("c1"),
                                           "--node-id", n, "--cluster-ttl", f"{TTL}s",
                                           "--metrics-listen", "127.0.0.1:0",
                                           pool_size="32MiB", stderr=subprocess.DEVNULL)
            c1.procs[n], tcp[n] = proc, port
            metrics[n] = int(line.split("metrics port ")[1].split()[0].rstrip(";,"))
        c = _client(etcd)
        assert _wait(lambda: len(c.cluster()["nodes"]) == 2)
        keys = [f"img-{i}" for i in range(40)]
        _put(c, keys)
        direct = ecstore.connect(f"tcp://127.0.0.1:{tcp['node-a']}", timeout=5.0, retries=0)
        held = [e.key for e in direct.list("n")]
        assert held
        # /metrics says where the member stands, for the alert rules (deploy/monitoring/).
        port = metrics["node-a"]
        assert _wait(lambda: _metric(port, "ecstore_cluster_members") == 2, 5)
        for name in ("member", "registered", "serving", "etcd_reachable"):
            assert _metric(port, f"ecstore_cluster_{name}") == 1, name
        assert _metric(port, "ecstore_cluster_view_age_seconds") < 5
        assert _metric(port, "ecstore_cluster_view_revision") > 0
        etcd.stop()
        # Nobody can tell whether the members changed: the nodes' leases and views go
        # unconfirmed, they refuse, and in doubt a cache misses (docs/guarantees.md).
        assert _wait(lambda: not c.cluster()["current"], 5)
        assert _wait(lambda: _hits(c, keys) == 0, 5)
        with pytest.raises(ecstore.errors.Unavailable, match="not done"):
            c.erase_many("n", keys[:10])
        with pytest.raises(ecstore.errors.Unavailable, match="not acknowledged"):
            c.put("n", keys[0], _value(0), dtype="U8", shape=[4096])
        with pytest.raises(ecstore.errors.Unavailable, match="refuses to serve"):
            direct.get("n", held[0], like="numpy")
        assert _wait(lambda: _healthz(metrics["node-a"])[1].startswith("degraded"), 5)
        assert _healthz(metrics["node-a"])[0] == 200
        assert _metric(port, "ecstore_cluster_serving") == 0
        assert _metric(port, "ecstore_cluster_etcd_reachable") == 0
        assert _metric(port, "ecstore_cluster_view_age_seconds") > 1
        etcd.start()
        assert _wait(lambda: c.cluster()["current"] and len(c.cluster()["nodes"]) == 2, 20)
        assert _wait(lambda: _healthz(metrics["node-a"])[1] == "ok\n", 10)
        assert _wait(lambda: _metric(port, "ecstore_cluster_serving") == 1, 10)
        assert _metric(port, "ecstore_cluster_etcd_reachable") == 1
        # etcd renews every lease when it starts again: no node was out, nothing was dropped.
        assert _wait(lambda: _hits(c, keys) == 40, 10)
        direct.close()
    finally:
        c1.stop_all()


def test_the_cli_reaches_every_entry_through_the_cluster(cluster, etcd, tmp_path):
    ec = _ec_store_bin()
    c = _client(etcd)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    src = tmp_path / "x.bin"
    src.write_bytes(bytes(range(256)) * 16)
    for i in range(12):
        subprocess.run([ec, "--cluster", etcd.uri("c1"), "put", "-n", "n", f"k{i}", str(src),
                        "--dtype", "u8", "--shape", "4096"], check=True, capture_output=True)
    out = subprocess.run([ec, "--cluster", etcd.uri("c1"), "--json", "ls"], check=True,
                         capture_output=True, text=True).stdout
    listed = json.loads(out)
    assert len(listed) == 12
    assert all(e["node"] == c.owners("n", e["key"])[0] for e in listed)  # where each lies
    # locate says the same, from the CLI and from Python: the owner, in its pool.
    keys = [f"k{i}" for i in range(12)] + ["absent"]
    out = subprocess.run([ec, "--cluster", etcd.uri("c1"), "--json", "locate", "-n", "n", *keys],
                         check=True, capture_output=True, text=True).stdout
    located = {row["key"]: row["at"] for row in json.loads(out)["keys"]}
    assert located["absent"] == []
    for i in range(12):
        assert located[f"k{i}"] == [{"node": c.owners("n", f"k{i}")[0], "medium": "pool"}]
    assert c.locate("n", keys) == [[(c.owners("n", k)[0], "pool")] for k in keys[:12]] + [[]]
    got = tmp_path / "y.bin"
    subprocess.run([ec, "--cluster", etcd.uri("c1"), "get", "-n", "n", "k7", "-o", str(got)],
                   check=True, capture_output=True)
    assert got.read_bytes() == src.read_bytes()
    status = subprocess.run([ec, "--cluster", etcd.uri("c1"), "--json", "cluster", "status"],
                            check=True, capture_output=True, text=True).stdout
    nodes = json.loads(status)["nodes"]
    assert sorted(n["id"] for n in nodes) == ["node-a", "node-b", "node-c"]
    assert sum(n["entries"] for n in nodes) == 12
    assert all(n["lease_ttl"].endswith(f"s/{TTL}s") for n in nodes), nodes
    bad = subprocess.run([ec, "--cluster", etcd.uri("c1"), "--server", "127.0.0.1:1", "ls"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "not both" in bad.stderr


def test_the_vllm_connector_through_the_cluster_hits_what_another_engine_saved(cluster, etcd):
    pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")
    import torch
    from types import SimpleNamespace
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
    from ecstore.vllm import EcStoreConnector
    from test_vllm_connector import MockRequest, ask_until_ready, make_config, one_request

    def engine(store):
        """A scheduler and a worker connector, as one vLLM engine makes them."""
        return [EcStoreConnector(make_config("ecstore", store, True, True), role)
                for role in (ECConnectorRole.SCHEDULER, ECConnectorRole.WORKER)]

    def run(sched, worker, req_id, image):
        return one_request(sched, worker, MockRequest(req_id, ["img"], [image.shape[0]]), "img",
                           image)

    c = _client(etcd)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    # Two engines, each with its own cluster client (two spellings of one etcd: two clients).
    producer = engine(etcd.uri("c1"))
    consumer = engine(etcd.uri("c1").replace("127.0.0.1", "localhost"))
    image = torch.randn(400, 256).to(torch.bfloat16)
    try:
        assert producer[0].cache is not consumer[0].cache
        hit, _ = run(*producer, "p1", image)
        assert not hit
        hit, loaded = run(*consumer, "c1", image)
        assert hit and torch.equal(loaded, image)
        # A new image both engines see at once: the one granted the claim computes it, the
        # other waits (its request "not ready yet") and then loads what was saved.
        fresh = torch.randn(400, 256).to(torch.bfloat16)
        first, second = MockRequest("p2", ["new"], [400]), MockRequest("c2", ["new"], [400])
        assert ask_until_ready(producer[0], first) and not producer[0].has_cache_item("new")
        assert not any(consumer[0].ensure_cache_available(second, 0) or time.sleep(0.01)
                       for _ in range(20))  # held: never ready while the claim's owner computes
        producer[0].update_state_after_alloc(first, 0)
        producer[1].bind_connector_metadata(producer[0].build_connector_meta(SimpleNamespace()))
        producer[1].save_caches(encoder_cache={"new": fresh}, mm_hash="new")
        producer[1].wait_for_saves()
        producer[1].clear_connector_metadata()
        producer[0].request_finished(first)
        assert ask_until_ready(consumer[0], second) and consumer[0].has_cache_item("new")
        consumer[0].update_state_after_alloc(second, 0)
        consumer[1].bind_connector_metadata(consumer[0].build_connector_meta(SimpleNamespace()))
        loaded = {}
        consumer[1].start_load_caches(encoder_cache=loaded)
        assert torch.equal(loaded["new"], fresh)
        consumer[1].clear_connector_metadata()
        consumer[0].request_finished(second)
        assert consumer[0].get_ec_connector_stats().data["claim_waits"] == 1
        # The cluster client's counts reach vLLM's stats (the scheduler's connector reports).
        assert producer[0].get_ec_connector_stats().data["cluster_routed"] > 0
        worker = producer[1].get_ec_connector_stats()
        assert worker is None or "cluster_routed" not in worker.data
        # It lies on the owner node of its key, which both engines' clients route to.
        for key in (e.key for e in c.list("test")):
            owner = {n["id"]: n for n in c.cluster()["nodes"]}[c.owners("test", key)[0]]
            assert key in [e.key for e in ecstore.connect("tcp://" + owner["tcp"]).list("test")]
    finally:
        for conn in producer + consumer:
            conn.shutdown()


def test_the_readmes_cluster_section_runs_as_written(etcd, tmp_path):
    """The README's Cluster block, pasted on one host: its etcd, directory and addresses
    swapped for this test's."""
    import re
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    start = readme.index("## Cluster")
    section = readme[start:readme.index("\n## ", start)]
    block = re.findall(r"```sh\n(.*?)```", section, re.S)[0]
    port = _port()
    token = tmp_path / "etc" / "token"
    token.parent.mkdir()
    script = (block.replace("etcd://10.0.0.2:2379", f"etcd://127.0.0.1:{etcd.client}")
              .replace("/var/cache/ec-store", str(tmp_path / "ec"))
              .replace("/etc/ec-store/token", str(token))
              .replace("0.0.0.0:7070", f"127.0.0.1:{port}")
              .replace("10.0.0.5:7070", f"127.0.0.1:{port}")
              .replace("ec-store ", f"{_ec_store_bin()} "))
    # Before the daemon (the token), the daemon (the line ending in &), and after it.
    before, serve, rest = re.match(r"(.*?)^([^\n]*(?:\\\n[^\n]*)*&)\n(.*)", script,
                                   re.S | re.M).groups()
    subprocess.run(["bash", "-euo", "pipefail", "-c", before], check=True)
    daemon = subprocess.Popen(["bash", "-c", "exec " + serve.rstrip("& ")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "port" in daemon.stdout.readline()
        c = ecstore.connect(f"etcd://127.0.0.1:{etcd.client}/prod",
                            token=token.read_text().strip())
        assert _wait(lambda: len(c.cluster()["nodes"]) == 1)
        c.put("n", "k", np.arange(16, dtype=np.uint8), dtype="U8", shape=[16])
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", rest], capture_output=True,
                             text=True, check=True).stdout
        assert f"127.0.0.1:{port}" in out and "1 entries" in out
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


_CLAIMER = r"""
import os, sys, time
import numpy as np
import ecstore
uri, ns, key, start, die = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
c = ecstore.connect(uri, timeout=2.0)
while not os.path.exists(start):
    time.sleep(0.001)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    got = c.get_many(ns, [key], like="numpy")[0]
    if got is not None:
        print("read", bytes(got[:8]).decode(), flush=True)
        break
    outcome, left = c.claim(ns, key, ttl=1.0)
    if outcome == "granted":
        if die:
            print("died", flush=True)
            os._exit(0)  # the claim is never put: it lapses
        time.sleep(0.2)  # the encoder
        c.put(ns, key, np.frombuffer(b"encoded!" * 512, np.uint8), dtype="U8", shape=[4096])
        print("computed", flush=True)
        break
    time.sleep(min(max(left, 0.001), 0.01))
"""


def _claimers(etcd, tmp_path, n, key="new-img", die=False):
    start = tmp_path / "go"
    start.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, etcd.uri("c1"), "n", key,
                               str(start), "1" if die else "0"],
                              stdout=subprocess.PIPE, text=True) for i in range(n)]
    time.sleep(1.0)  # every process connected and waiting
    start.touch()
    return [p.communicate(timeout=60)[0].strip() for p in procs]


def test_claims_make_eight_engines_that_miss_one_key_at_once_compute_it_once(
        cluster, etcd, tmp_path):
    c = _client(etcd)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    said = _claimers(etcd, tmp_path, 8)
    assert said.count("computed") == 1, said
    assert said.count("read encoded!") == 7, said


def test_a_claim_whose_holder_dies_lapses_and_another_engine_computes(cluster, etcd, tmp_path):
    c = _client(etcd)
    assert _wait(lambda: len(c.cluster()["nodes"]) == 3)
    assert c.claim("n", "lapsing", ttl=0.5) == ("granted", 0.0)
    outcome, left = c.claim("n", "lapsing", ttl=0.5)
    assert outcome == "held" and 0 < left <= 0.5
    time.sleep(0.6)  # its holder never puts
    assert c.claim("n", "lapsing", ttl=0.5)[0] == "granted"
    # An engine claims a new key and dies before its put; the next engine that misses it
    # hears the claim is held, waits, and computes it once the claim lapses.
    assert _claimers(etcd, tmp_path, 1, key="orphan", die=True) == ["died"]
    assert c.claim("n", "orphan", ttl=1.0)[0] == "held"
    assert _claimers(etcd, tmp_path, 1, key="orphan") == ["computed"]


def test_with_two_replicas_a_killed_owner_costs_no_miss(cluster, etcd):
    c, keys = _loaded(etcd, 30, replicas=2)
    # Each entry on its first two choices (three nodes, three hosts' worth of ids).
    held = {}
    for n in c.cluster()["nodes"]:
        held[n["id"]] = {e.key for e in ecstore.connect("tcp://" + n["tcp"]).list("n")}
    for k in keys:
        assert {i for i, ks in held.items() if k in ks} == set(c.owners("n", k, 2)), k
    victim = "node-a"
    cluster.procs[victim].kill()
    cluster.procs[victim].wait()
    assert _hits(c, keys) == len(keys)  # its keys read from their second replica at once
    with pytest.raises(ecstore.errors.InvalidArgument, match="is for a cluster"):
        ecstore.connect("tcp://127.0.0.1:1", replicas=2)


def test_a_node_on_this_host_is_reached_through_its_socket_whatever_it_advertises(
        etcd, tmp_path):
    # It advertises a name for its address (checked at start: it reaches this node), and a
    # client on this host still takes its socket and shared memory.
    port = _port()
    proc, _, _ = start_serve(tmp_path / "n", "--cluster", etcd.uri("c3"), "--node-id", "local",
                             "--advertise", f"localhost:{port}", port=port, pool_size="32MiB",
                             stderr=subprocess.DEVNULL)
    try:
        c = ecstore.connect(etcd.uri("c3"), timeout=1.0, retries=0)
        assert _wait(lambda: len(c.cluster()["nodes"]) == 1)
        _put(c, ["k"])
        assert _hits(c, ["k"]) == 1
        assert [n["transport"] for n in c.cluster()["nodes"]] == ["shm"]
        assert [n["tcp"] for n in c.cluster()["nodes"]] == [f"localhost:{port}"]
    finally:
        proc.kill()
        proc.wait()


def test_an_advertised_address_that_is_not_this_node_is_refused(cluster, etcd, tmp_path):
    other = {n["id"]: n for n in _client(etcd).cluster()["nodes"]}["node-a"]["tcp"]
    for address, why in ((other, "another node answers there"),
                         (f"127.0.0.1:{_port()}", "cannot connect")):
        proc = subprocess.run(
            [_ec_store_bin(), "serve", "--dir", str(tmp_path / "liar"), "--pool-size", "32MiB",
             "--listen", "127.0.0.1:0", "--cluster", etcd.uri("c1"), "--advertise", address],
            capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert f"--advertise {address} does not reach this node" in proc.stderr, proc.stderr
        assert why in proc.stderr, proc.stderr
    assert len(_client(etcd).cluster()["nodes"]) == 3


def _etcd_put(etcd, key: str, value: str):
    """Writes a raw key through etcd's v3 JSON gateway, as any etcd writer could."""
    import base64
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{etcd.client}/v3/kv/put", data=body,
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()


_BAD_RECORDS = {
    "num-id": json.dumps({"id": 7, "tcp": "127.0.0.1:1"}),
    "null-tcp": json.dumps({"id": "null-tcp", "tcp": None}),
    "str-capacity": json.dumps({"id": "str-capacity", "tcp": "127.0.0.1:1", "capacity": "big"}),
    "neg-capacity": json.dumps({"id": "neg-capacity", "tcp": "127.0.0.1:1", "capacity": -1}),
    "huge-capacity": json.dumps({"id": "huge-capacity", "tcp": "127.0.0.1:1",
                                 "capacity": 2 ** 63}),
    "bad-port": json.dumps({"id": "bad-port", "tcp": "127.0.0.1:abc"}),
    "other-id": json.dumps({"id": "node-a", "tcp": "127.0.0.1:1"}),
    "not-json": "{\"id\": ",
    "array": "[1, 2]",
}


def test_malformed_member_records_are_skipped_and_counted_never_a_crash(cluster, etcd,
                                                                        tmp_path):
    before = _client(etcd)  # following the members while the records arrive
    _wait(lambda: len(before.cluster()["nodes"]) == 3)
    for name, value in _BAD_RECORDS.items():
        _etcd_put(etcd, f"/ec-store/c1/nodes/{name}", value)
    assert _wait(lambda: before.cluster()["bad_records"] >= len(_BAD_RECORDS)), before.cluster()
    after = _client(etcd)  # reading them at start
    for c in (before, after):
        view = c.cluster()
        assert sorted(n["id"] for n in view["nodes"]) == ["node-a", "node-b", "node-c"], view
        assert view["bad_records"] >= len(_BAD_RECORDS), view
    # Both still route: what one puts the other reads, on the real nodes.
    for i in range(12):
        before.put("n", f"k{i}", bytes([i]) * 64, dtype="U8", shape=[64])
    for i in range(12):
        assert bytes(after.get("n", f"k{i}", like="numpy")) == bytes([i]) * 64
    # A daemon joining the cluster reads them too, and starts.
    port = cluster.start("node-d")
    assert port > 0 and cluster.procs["node-d"].poll() is None
    assert _wait(lambda: len(after.cluster()["nodes"]) == 4), after.cluster()
    before.close()
    after.close()


@pytest.mark.parametrize("uri", ["etcd://127.0.0.1:abc/c1", "etcd://127.0.0.1:99999/c1",
                                 "etcd://127.0.0.1:/c1"])
def test_a_bad_etcd_port_is_a_usage_error_naming_the_form(uri):
    with pytest.raises(ecstore.InvalidArgument, match=r"etcd://HOST:PORT"):
        ecstore.connect(uri)
