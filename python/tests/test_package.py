"""The ecstore package: embedded and remote caches behave alike (one Cache interface)."""

import concurrent.futures
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import ecstore

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.fixture(params=["embedded", "tcp", "shm"])
def cache(request, tmp_path):
    if request.param == "embedded":
        c = ecstore.open(str(tmp_path / "store"), "64MiB")
    else:
        addr = request.getfixturevalue("daemon")
        c = ecstore.connect(addr["tcp"], transport="tcp" if request.param == "tcp" else "auto")
        assert c.transport == request.param
    yield c
    c.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensors_round_trip_byte_exact(cache, dtype):
    for rows in (1, 400, 2000):
        t = torch.randn(rows, 3584 // 4).to(dtype)
        cache.put("qwen", f"img-{rows}", t)
        got = cache.get("qwen", f"img-{rows}")
        assert got.dtype == dtype and got.shape == t.shape
        assert torch.equal(got.view(torch.uint8), t.view(torch.uint8))


def test_numpy_and_raw_bytes(cache):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    cache.put("ns", "arr", a)
    np.testing.assert_array_equal(cache.get("ns", "arr", like="numpy"), a)
    raw = bytes(range(256)) * 4
    cache.put("ns", "raw", raw, dtype="U8", shape=[4, 256])
    assert cache.get("ns", "raw", like="numpy").tobytes() == raw
    bf = torch.randn(8, 8, dtype=torch.bfloat16)
    cache.put("ns", "bf", bf)
    bits = cache.get("ns", "bf", like="numpy")  # numpy has no bf16: the raw bits
    assert bits.dtype in (np.uint16,) or bits.dtype.name == "bfloat16"
    assert bits.tobytes() == bf.view(torch.uint8).numpy().tobytes()
    # The bits go back as BF16 when said so; as plain uint16 (numpy without ml_dtypes) they
    # are refused with that hint.
    if bits.dtype == np.uint16:
        with pytest.raises(ValueError, match="dtype='BF16'"):
            cache.put("ns", "bf2", bits)
    cache.put("ns", "bf2", bits, dtype="BF16")
    assert torch.equal(cache.get("ns", "bf2", like="torch"), bf)
    # One store (embedded or a daemon): its own copies, node "", in the medium holding them.
    assert cache.locate("ns", ["arr", "absent"]) == [[("", "pool")], []]


def test_get_into_a_host_buffer_from_the_disk_tier(tmp_path):
    """A HostBuffer (pinned, huge pages where there are any) as get_into's destination, for an
    entry read from disk without promotion (O_DIRECT straight into it): byte-exact."""
    buf = ecstore.host_buffer("8MiB")
    assert buf.dtype == np.uint8 and buf.shape == (8 << 20,) and buf.flags.writeable
    t = torch.randn(1024, 1024)  # 4 MiB
    with ecstore.open(str(tmp_path / "s"), "6MiB", promote_on_get=False) as c:
        c.put("ns", "a", t)
        c.put("ns", "b", t * 2)  # pushes "a" out of the 6 MiB pool to disk
        c.flush()
        assert c.lookup("ns", "a").tier == "disk"
        info = c.get_into("ns", "a", buf[: t.numel() * 4])
        assert info.bytes == t.numel() * 4
        assert torch.equal(torch.from_numpy(buf[: info.bytes]).view(torch.float32).view(1024, 1024), t)
    with pytest.raises(ecstore.InvalidArgument):
        ecstore.host_buffer(0)


def test_get_into_get_many_lookup_contains_erase_list(cache):
    t = torch.randn(64, 64)
    cache.put("ns", "a", t)
    cache.put("ns", "b", t * 2)
    out = torch.empty(64, 64)
    info = cache.get_into("ns", "a", out)
    assert torch.equal(out, t) and info.bytes == t.numel() * 4 and info.dtype == "F32"
    many = cache.get_many("ns", ["a", "missing", "b"])
    assert many[1] is None and torch.equal(many[0], t) and torch.equal(many[2], t * 2)
    assert cache.contains("ns", "a") and not cache.contains("ns", "zz")
    assert cache.contains_many("ns", ["a", "zz", "b"]) == [True, False, True]
    assert cache.lookup("ns", "zz") is None
    assert [i is not None for i in cache.lookup_many("ns", ["a", "zz"])] == [True, False]
    assert sorted(i.key for i in cache.list("ns")) == ["a", "b"]
    assert cache.erase("ns", "a") and not cache.erase("ns", "a")
    with pytest.raises(ecstore.NotFound):
        cache.get("ns", "a")


def test_erase_many_answers_each_key_and_a_bad_one_erases_nothing(cache):
    for k in ("a", "b", "c"):
        cache.put("ns", k, torch.randn(16, 16))
    with pytest.raises(ecstore.InvalidArgument, match="key is empty"):
        cache.erase_many("ns", ["a", ""])
    assert cache.contains_many("ns", ["a", "b", "c"]) == [True, True, True]
    assert cache.erase_many("ns", ["a", "missing", "c", "a"]) == [True, False, True, False]
    assert cache.contains_many("ns", ["a", "b", "c"]) == [False, True, False]
    assert cache.erase_many("ns", []) == []


def test_leases_read_in_place_and_outlive_their_block(cache):
    t = torch.randn(300, 300)
    cache.put("ns", "k", t)
    with cache.acquire("ns", "k") as lease:
        assert torch.equal(lease.tensor(), t)
        view = lease.array()  # keeps the entry pinned after the block
    np.testing.assert_array_equal(view, t.numpy())
    with cache.pin("ns", "k") as pin:
        assert pin.info.bytes == t.numel() * 4
    with pytest.raises(ecstore.NotFound):
        cache.acquire("ns", "nope")


def test_acquire_many_leases_each_key_in_place(cache):
    a, b = torch.randn(64, 64), torch.randn(32, 8)
    cache.put("ns", "a", a)
    cache.put("ns", "b", b)
    leases = cache.acquire_many("ns", ["a", "missing", "b"])
    assert leases[1] is None
    with leases[0] as la, leases[2] as lb:
        assert torch.equal(la.tensor(), a) and torch.equal(lb.tensor(), b)
    with pytest.raises(ecstore.InvalidArgument, match="key is empty"):
        cache.acquire_many("ns", ["a", ""])


def _on_disk_only(path, n):
    """An embedded store holding n 1 MiB arrays k0..k{n-1}, reopened: every entry on disk only."""
    c = ecstore.open(str(path), "16MiB")
    arrays = [np.arange(i, i + 256 * 1024, dtype=np.float32) for i in range(n)]
    for i, a in enumerate(arrays):
        c.put("ns", f"k{i}", a)
    c.close()
    return ecstore.open(str(path), "16MiB"), arrays


def test_acquire_many_promotes_disk_entries_in_one_batch(tmp_path):
    c, arrays = _on_disk_only(tmp_path / "p", 4)
    leases = c.acquire_many("ns", ["k0", "k2", "k3"])
    for lease, i in zip(leases, (0, 2, 3)):
        with lease:
            assert np.array_equal(lease.array().view(np.float32), arrays[i])
    stats = c.stats()
    assert stats["pool"]["promotions"] == 3 and stats["disk"]["hits"] == 3
    assert c.lookup("ns", "k1").tiers == ["disk"]
    c.close()


def test_errors_are_classes_with_messages(cache):
    with pytest.raises(ecstore.InvalidArgument, match="cannot contain '/'"):
        cache.put("ns", "a/b", torch.zeros(4))
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        cache.put("ns", "", torch.zeros(4))
    with pytest.raises(ValueError, match="dtype= and shape="):
        cache.put("ns", "k", b"1234")
    with pytest.raises(ecstore.NotFound) as e:
        cache.get("ns", "absent")
    assert "absent" in str(e.value) and isinstance(e.value, KeyError)
    # Each class is also the built-in exception it stands for.
    assert issubclass(ecstore.IOError, OSError) and issubclass(ecstore.Unavailable, OSError)
    assert issubclass(ecstore.PermissionDenied, PermissionError)
    small = torch.empty(2)
    cache.put("ns", "big", torch.zeros(100))
    with pytest.raises(ecstore.InvalidArgument, match="destination buffer"):
        cache.get_into("ns", "big", small)


def test_stats_have_one_schema(cache, tmp_path):
    cache.put("ns", "k", torch.zeros(1000))
    s = cache.stats()
    assert s["pool"]["capacity"] == 64 << 20 and "disk" in s and "transport" in s
    local = ecstore.open(str(tmp_path / "other"), "64MiB")
    assert set(local.stats()) == set(s) and set(local.stats()["pool"]) == set(s["pool"])
    local.close()


def test_registered_memory_is_read_into_and_counted_where_it_lands(cache):
    """register_memory is taken by every cache (a no-op but over RDMA: the Soft-RoCE tests
    count direct and bounced reads there); gets into registered memory read as any other,
    and stats()["transfer"] says how this process's gets landed."""
    t = torch.randn(512, 64)
    cache.put("ns", "k", t)
    buf = torch.empty(512, 64)
    cache.register_memory(buf)
    cache.get_into("ns", "k", buf)
    assert torch.equal(buf, t)
    cache.unregister_memory(buf)
    transfer = cache.stats()["transfer"]
    assert set(transfer) == {"direct_reads", "direct_bytes", "bounced_reads", "bounced_bytes",
                             "peer_copies", "peer_bytes", "host_path_copies", "host_path_bytes"}
    assert transfer["bounced_reads"] == 0  # nothing here lands through a bounce buffer
    assert transfer["peer_copies"] == transfer["host_path_copies"] == 0  # no GPU to GPU get
    with pytest.raises(ecstore.InvalidArgument, match="contiguous"):
        cache.register_memory(torch.empty(8, 8).t())


def test_threads_share_one_cache(cache):
    errors = []

    def worker(n):
        try:
            for i in range(20):
                t = torch.full((256, 256), float(n * 100 + i))
                cache.put("ns", f"t{n}-{i}", t)
                assert torch.equal(cache.get("ns", f"t{n}-{i}"), t)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_embedded_store_is_durable_across_reopen(tmp_path):
    t = torch.randn(50, 50, dtype=torch.bfloat16)
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        c.put("ns", "k", t)
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        assert torch.equal(c.get("ns", "k"), t)
    with pytest.raises(ecstore.InvalidArgument):
        ecstore.open(str(tmp_path / "s"), "lots")


def test_a_second_open_of_one_directory_is_refused(tmp_path):
    with ecstore.open(str(tmp_path / "s"), "16MiB"):
        with pytest.raises(ecstore.Error, match="another process|in use"):
            ecstore.open(str(tmp_path / "s"), "16MiB")


def test_unreachable_server_is_unavailable():
    with pytest.raises(ecstore.Unavailable):
        ecstore.connect("tcp://127.0.0.1:1", timeout=1.0, retries=0)


def test_reserve_and_commit_fill_the_pool_in_place(tmp_path):
    c = ecstore.open(str(tmp_path / "s"), "16MiB")
    t = torch.randn(100, 100)
    r = c.reserve("ns", "k", "F32", [100, 100])
    r.view()[:] = t.view(-1).view(torch.uint8).numpy()
    assert not c.contains("ns", "k")  # not visible before commit
    r.commit()
    assert torch.equal(c.get("ns", "k"), t)
    with pytest.raises(ecstore.InvalidArgument):
        r.commit()
    c.reserve("ns", "gone", "F32", [10]).abandon()
    assert not c.contains("ns", "gone")
    assert c.pool_region()[1] == 16 << 20
    c.close()


def test_a_reservation_checksummed_when_spilled_reads_back_checked(tmp_path):
    """As the connector's saver commits: readable at once, hashed by the spill (flush
    here), and read back from disk after a reopen against that checksum."""
    t = torch.randn(256, 256)
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        r = c.reserve("ns", "k", "F32", [256, 256])
        r.view()[:] = t.view(-1).view(torch.uint8).numpy()
        r.commit(checksum_when_spilled=True)
        assert torch.equal(c.get("ns", "k"), t)
        c.flush()
        assert c.lookup("ns", "k").checksum != 0
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        assert c.lookup("ns", "k").tier == "disk"
        assert torch.equal(c.get("ns", "k"), t)


def test_a_get_is_sized_by_the_stores_own_answer_without_a_lookup(tmp_path):
    """An embedded store's get of a disk entry is one call: the store answers the size and
    layout it needs, and no lookup is made (none counted)."""
    t = torch.arange(3 * 1000, dtype=torch.float32).reshape(3, 1000)
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        c.put("ns", "k", t)
    with ecstore.open(str(tmp_path / "s"), "16MiB") as c:
        assert c._c.lookup("ns", "k").tier == "disk"
        before = c.stats()["lookups"]["hits"]
        got = c.get("ns", "k")
        assert torch.equal(got, t) and got.shape == (3, 1000)
        assert c.stats()["lookups"]["hits"] == before
        c.put("ns", "k", torch.ones(5, 7, dtype=torch.bfloat16))  # replaced, another size
        assert c.get("ns", "k").shape == (5, 7)
        with pytest.raises(ecstore.NotFound):
            c.get("ns", "absent")


def test_reserve_needs_an_embedded_store_or_the_same_host(daemon):
    c = ecstore.connect(daemon["tcp"], transport="tcp")
    with pytest.raises(ecstore.InvalidArgument, match="same-host.*use put"):
        c.reserve("ns", "k", "F32", [4])
    assert c.pool_region() == (0, 0, True)
    c.close()


def test_a_same_host_reservation_fills_the_daemons_put_arena(daemon):
    """Through a same-host daemon, a reservation is a block of the connection's put arena:
    filled in place, committed (the daemon copies it once), read back byte for byte; with
    checksum_when_spilled it is hashed by the daemon's spill, not at commit."""
    c = ecstore.connect(daemon["unix"])
    t, u = torch.randn(300, 300), torch.randn(50, 70)
    r = c.reserve("ns", "k", "F32", [300, 300])
    addr, size = r.arena()
    assert addr != 0 and size >= 64 << 20
    r.view()[:] = t.view(-1).view(torch.uint8).numpy()
    assert not c.contains("ns", "k")  # not visible before commit
    r.commit()
    assert torch.equal(c.get("ns", "k"), t)
    assert c.lookup("ns", "k").checksum != 0
    r2 = c.reserve("ns", "later", "F32", [50, 70])
    assert r2.arena() == (addr, size)  # the same arena, asked for once
    r2.view()[:] = u.view(-1).view(torch.uint8).numpy()
    r2.commit(checksum_when_spilled=True)
    assert torch.equal(c.get("ns", "later"), u)
    with pytest.raises(ecstore.InvalidArgument, match="committed or abandoned"):
        r2.commit()
    c.reserve("ns", "gone", "F32", [10]).abandon()
    assert not c.contains("ns", "gone")
    c.close()
    off = ecstore.connect(daemon["unix"], put_arena=False)  # puts over the socket instead
    with pytest.raises(ecstore.InvalidArgument, match="use Put"):
        off.reserve("ns", "k2", "F32", [4])
    off.put("ns", "k2", u)
    assert torch.equal(off.get("ns", "k2"), u)
    off.close()


def test_a_landing_reservation_is_committed_while_its_bytes_land(daemon, tmp_path):
    """reserve(..., landing=True) through a same-host daemon: commit() runs on another thread
    at once, and the daemon copies each piece as landing.set() passes it -- what is stored is
    every byte as written, never the block's earlier contents. fail() stores nothing. An
    embedded store has no landing blocks (None: fill, then commit)."""
    c = ecstore.connect(daemon["unix"])
    t = torch.randn(1000, 1000)
    src = t.view(-1).view(torch.uint8).numpy()
    r = c.reserve("ns", "landed", "F32", [1000, 1000], landing=True)
    landing = r.landing()
    assert landing is not None and landing.landed == 0
    view = r.view()
    view[:] = 0xEE
    with concurrent.futures.ThreadPoolExecutor(1) as committer:
        done = committer.submit(r.commit, checksum_when_spilled=True)
        piece = 1 << 20
        for at in range(0, view.size, piece):
            time.sleep(0.005)
            view[at:at + piece] = src[at:at + piece]
            landing.set(min(view.size, at + piece))
        done.result(timeout=30)
    assert torch.equal(c.get("ns", "landed"), t)
    r2 = c.reserve("ns", "given-up", "F32", [1000, 1000], landing=True)
    landing2 = r2.landing()  # before the commit takes the reservation
    with concurrent.futures.ThreadPoolExecutor(1) as committer:
        done = committer.submit(r2.commit)
        time.sleep(0.01)
        landing2.fail()
        with pytest.raises(ecstore.InvalidArgument, match="given up"):
            done.result(timeout=30)
    assert not c.contains("ns", "given-up")
    c.close()
    local = ecstore.open(str(tmp_path / "emb"), "64MiB", "256MiB")
    r3 = local.reserve("ns", "k", "F32", [4], landing=True)
    assert r3.landing() is None
    r3.view()[:] = torch.ones(4).view(torch.uint8).numpy()
    r3.commit()
    assert torch.equal(local.get("ns", "k"), torch.ones(4))
    local.close()


def test_prefetch_reads_disk_entries_into_the_pool_in_one_batch(tmp_path):
    c, arrays = _on_disk_only(tmp_path / "p", 6)
    assert c.lookup("ns", "k0").tiers == ["disk"]
    assert c.prefetch("ns", ["k0", "k3", "absent"]) is True
    assert "pool" in c.lookup("ns", "k0").tiers and "pool" in c.lookup("ns", "k3").tiers
    assert c.lookup("ns", "k1").tiers == ["disk"]
    assert c.stats()["pool"]["promotions"] == 2
    for i in (0, 3):
        assert np.array_equal(c.get("ns", f"k{i}", like="numpy"), arrays[i])
    c.close()


def test_a_daemon_queues_a_prefetch_and_reads_the_entries_into_its_pool(daemon):
    """Through a daemon (TCP and same host), prefetch is PREFETCH: queued and answered at once,
    the daemon's own thread then reads the disk-only entries into its pool. A bad key is
    refused and nothing is queued."""
    arrays = [np.arange(i, i + 256 * 1024, dtype=np.float32) for i in range(96)]
    w = ecstore.connect(daemon["unix"])
    for i, a in enumerate(arrays):  # 96 MiB through a 64 MiB pool: the first ones leave it
        w.put("ns", f"k{i}", a)
    cold = [f"k{i}" for i in range(96) if w.lookup("ns", f"k{i}").tiers == ["disk"]]
    assert len(cold) >= 4
    w.erase_many("ns", [f"k{i}" for i in range(88, 96)])  # room: a prefetch evicts nothing
    for uri, keys in ((daemon["tcp"], cold[:2]), (daemon["unix"], cold[2:4])):
        c = ecstore.connect(uri)
        assert c.prefetch("ns", keys) is True
        for _ in range(500):  # the daemon's prefetcher reads them (within 10 s, sanitizers too)
            if all("pool" in c.lookup("ns", k).tiers for k in keys):
                break
            time.sleep(0.02)
        assert all("pool" in c.lookup("ns", k).tiers for k in keys), keys
        with pytest.raises(ecstore.InvalidArgument):
            c.prefetch("ns", ["ok", ""])
        c.close()
    for k in cold[:4]:
        assert np.array_equal(w.get("ns", k, like="numpy"), arrays[int(k[1:])])
    w.close()


def test_a_second_put_of_the_same_entry_keeps_it(cache):
    # Embedded and through a daemon (whose PUT fills a reserved block, then commits): the store
    # compares the bytes and keeps its entry, with nothing written to disk again.
    t = torch.randn(400, 896).to(torch.bfloat16)
    cache.put("ns", "same", t)
    first = cache.lookup("ns", "same")
    for _ in range(200):  # write-back puts it on disk (within 10 s, sanitizers included)
        if "disk" in cache.lookup("ns", "same").tiers:
            break
        threading.Event().wait(0.05)
    spills = cache.stats()["pool"]["spills"]
    cache.put("ns", "same", t.clone())
    kept = cache.lookup("ns", "same")
    assert kept.created_us == first.created_us and "disk" in kept.tiers
    assert cache.stats()["pool"]["spills"] == spills
    other = t.clone()
    other[0, 0] += 1
    cache.put("ns", "same", other)
    assert cache.lookup("ns", "same").created_us != first.created_us
    assert torch.equal(cache.get("ns", "same"), other)


class _StaleLookups:
    """The core with lookups answering what a key held before it was replaced: the race of a
    re-put landing between a get's lookup and its read, made deterministic."""

    def __init__(self, core, stale):
        self._core, self._stale = core, stale

    def lookup(self, ns, key):
        return self._stale.pop(key, None) or self._core.lookup(ns, key)

    def lookup_many(self, ns, keys):
        return [self.lookup(ns, k) for k in keys]

    def __getattr__(self, name):
        return getattr(self._core, name)


def test_a_get_sized_before_a_smaller_re_put_returns_the_new_entry(cache):
    big, small = torch.randn(100, 64), torch.randn(10, 64)
    cache.put("ns", "k", big)
    cache.put("ns", "j", big)
    stale = {"k": cache.lookup("ns", "k"), "j": cache.lookup("ns", "j")}
    cache.put("ns", "k", small)  # replaced by a smaller entry after the "lookup"
    cache.put("ns", "j", small)
    core = cache._c
    cache._c = _StaleLookups(core, dict(stale))
    try:
        got = cache.get("ns", "k")
        assert got.shape == small.shape and torch.equal(got, small)
        cache._c._stale = dict(stale)
        many = cache.get_many("ns", ["j", "absent"])
        assert many[1] is None
        assert many[0].shape == small.shape and torch.equal(many[0], small)
    finally:
        cache._c = core


def test_a_get_many_sized_before_a_larger_re_put_returns_the_new_entries(cache):
    small, big = torch.randn(10, 64), torch.randn(100, 64)
    for k in ("k", "j"):
        cache.put("ns", k, small)
    stale = {"k": cache.lookup("ns", "k"), "j": cache.lookup("ns", "j")}
    cache.put("ns", "k", big)  # replaced by a larger entry after the "lookup"
    core = cache._c
    cache._c = _StaleLookups(core, stale)
    try:
        many = cache.get_many("ns", ["k", "absent", "j"])
        assert many[1] is None
        assert many[0].shape == big.shape and torch.equal(many[0], big)
        assert torch.equal(many[2], small)
    finally:
        cache._c = core


def test_parts_with_a_null_or_wrapping_address_are_refused_before_any_copy(cache):
    buf = np.zeros(64, np.uint8)
    cache.put("ns", "k", np.arange(64, dtype=np.uint8), dtype="U8", shape=[64])
    for ptrs, why in (([[0]], "null address"), ([[2 ** 64 - 8]], "wraps around")):
        for call in (cache.get_into_parts, cache.put_from_parts):
            with pytest.raises(ecstore.InvalidArgument, match=why):
                call("ns", ["k"], ptrs, [[64]])
    assert cache.get_into_parts("ns", ["k"], [[buf.ctypes.data]], [[64]]) == [(True, False, "")]
    assert bytes(buf) == bytes(range(64))


_VIEW_OUTLIVES = {
    "closed": "r = c.reserve('ns', 'k', 'U8', [1 << 20]); v = r.view(); v[:] = 3; r.commit(); "
              "c.close(); assert v[0] == 3 and v[-1] == 3",
    "deleted": "r = c.reserve('ns', 'k', 'U8', [1 << 20]); v = r.view(); v[:] = 3; r.commit(); "
               "del c; import gc; gc.collect(); assert v[0] == 3",
    "pending": "r = c.reserve('ns', 'k', 'U8', [1 << 20]); v = r.view(); v[:] = 5; c.close(); "
               "assert v[7] == 5; del r; assert v[7] == 5",
    "abandoned at exit": "r = c.reserve('ns', 'k', 'U8', [1 << 20]); v = r.view(); "
                         "r.abandon()",
}


@pytest.mark.parametrize("case", list(_VIEW_OUTLIVES))
def test_a_reservation_view_outliving_its_cache_stays_mapped(tmp_path, case):
    """A view keeps what it points into: the reservation's block and the store's pool, past
    close(), the Cache's deletion and interpreter exit (no crash, no hang); the store shuts
    with the last view, and what was committed before close() is there when it reopens."""
    code = (f"import ecstore; c = ecstore.open({str(tmp_path / 's')!r}, pool_size='16MiB'); "
            + _VIEW_OUTLIVES[case] + "; print('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode, run.stderr)
    with ecstore.open(str(tmp_path / "s"), pool_size="16MiB") as c:
        if case in ("closed", "deleted"):
            assert bytes(c.get("ns", "k", like="numpy")[:4]) == b"\x03" * 4
        else:
            assert not c.contains("ns", "k")


@pytest.mark.parametrize("where", ["embedded", "shm"])
def test_a_reservation_view_stops_being_writable_when_it_ends(tmp_path, where, request):
    """After commit the block is the entry's, after abandon it is free: a view written then
    would change the stored entry or another key's; it raises instead."""
    if where == "embedded":
        c = ecstore.open(str(tmp_path / "s"), "16MiB")
    else:
        c = ecstore.connect(request.getfixturevalue("daemon")["tcp"], transport="auto")
        assert c.transport == "shm"
    with c:
        data = np.arange(1000, dtype=np.float32)
        r = c.reserve("ns", "k", "F32", [1000])
        v = r.view()
        v[:] = data.view(np.uint8)
        r.commit()
        with pytest.raises(ValueError, match="read-only"):
            v[0] = 7
        np.testing.assert_array_equal(c.get("ns", "k", like="numpy"), data)
        a = c.reserve("ns", "gone", "F32", [1000])
        av = a.view()
        a.abandon()
        with pytest.raises(ValueError, match="read-only"):
            av[:] = 1
        c.put("ns", "other", data * 2)  # may take the abandoned block once the view is gone
        del av
        np.testing.assert_array_equal(c.get("ns", "other", like="numpy"), data * 2)
        with pytest.raises(ecstore.InvalidArgument, match="committed or abandoned"):
            r.view()


def test_a_lease_outliving_close_stays_readable(tmp_path):
    c = ecstore.open(str(tmp_path / "s"), "16MiB")
    t = torch.randn(64, 64)
    c.put("ns", "k", t)
    lease = c.acquire("ns", "k")
    arr = lease.view()
    c.close()  # persisted; the pool stays mapped while the lease and its views live
    assert torch.equal(lease.tensor(), t)
    assert bytes(lease.view()) == t.numpy().tobytes()
    lease.release()
    assert bytes(arr) == t.numpy().tobytes()
    del arr  # the last holder: the store is shut now
    again = ecstore.open(str(tmp_path / "s"), "16MiB")  # its directory lock was let go
    assert torch.equal(again.get("ns", "k"), t)
    again.close()


def test_a_landing_put_that_does_not_land_holds_up_no_other_call(daemon):
    """A landing reservation committed on one thread while its bytes have not begun to land
    does not hold the Cache's connection: a put on another thread goes through meanwhile."""
    c = ecstore.connect(daemon["tcp"], transport="auto")
    assert c.transport == "shm"
    with c:
        r = c.reserve("ns", "stalled", "U8", [4 << 20], landing=True)
        landing = r.landing()
        assert landing is not None
        with concurrent.futures.ThreadPoolExecutor(1) as committer:
            done = committer.submit(r.commit)
            time.sleep(0.1)  # the commit is waiting for the first piece
            c.put("ns", "meanwhile", np.arange(1000, dtype=np.float32))
            assert not done.done()  # the put did not wait behind it
            landing.fail()  # the writer gives up: the commit fails alone
            with pytest.raises(ecstore.InvalidArgument, match="given up"):
                done.result(timeout=30)
        np.testing.assert_array_equal(c.get("ns", "meanwhile", like="numpy"),
                                      np.arange(1000, dtype=np.float32))
        assert c.lookup("ns", "stalled") is None


def test_sizes_parse_as_the_cli_parses_them():
    """One parser for both (base/units.h): what the CLI refuses, the package refuses too."""
    assert ecstore.parse_size("256MiB") == 256 << 20
    assert ecstore.parse_size("1.5GiB") == 3 << 29
    assert ecstore.parse_size("2gb") == 2_000_000_000
    assert ecstore.parse_size(4096) == 4096
    for bad in ("4 GiB", "1e3MiB", "0x10", "-1", "4GiBs", "", True):
        with pytest.raises(ecstore.InvalidArgument):
            ecstore.parse_size(bad)


def test_errors_name_the_python_argument_not_a_library_field(tmp_path):
    """The library's messages say Options::pool_bytes; a Python caller sets pool_size."""
    with ecstore.open(str(tmp_path / "s"), pool_size="1MiB") as c:
        with pytest.raises(ecstore.NoSpace) as e:
            c.put("ns", "k", np.zeros(4 << 20, np.uint8))
    assert "raise pool_size" in str(e.value) and "Options::" not in str(e.value), e.value


def test_one_parse_of_addresses_and_durations_for_both_connectors(tmp_path):
    """The connectors' settings read as the CLI's: etcds:// is a cluster address with its etcd
    options, and a timeout is a duration ("5s", "500ms") as EC_STORE_TIMEOUT is for the CLI."""
    from ecstore.config import etcd_options, parse_seconds, parse_store

    spec = parse_store("etcds://10.0.0.2:2379,10.0.0.3:2379/prod")
    assert (spec.kind, spec.target) == ("etcd", "etcds://10.0.0.2:2379,10.0.0.3:2379/prod")
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    assert etcd_options({"etcd_ca": "/ca.pem", "etcd_user": "ec",
                         "etcd_password_file": str(pw)}, spec) == {
        "ca": "/ca.pem", "user": "ec", "password": "s3cret"}
    with pytest.raises(ValueError, match="for a cluster"):
        etcd_options({"etcd_ca": "/ca.pem"}, parse_store("tcp://10.0.0.5:7070"))
    assert [parse_seconds(t) for t in ("5s", "500ms", "2", "1m")] == [5.0, 0.5, 2.0, 60.0]
    with pytest.raises(ValueError, match="a duration such as 5s"):
        parse_seconds("fast")
