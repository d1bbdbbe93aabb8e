"""CUDA tensors in and out (byte-exact), on a machine with a GPU. CI has none: these skip
there, saying so; they run on the GPU machine by hand (docs/development.md: `make test-gpu`)."""

import pytest
import torch

import ecstore
from ecstore import transfer
from ecstore.transfer import AsyncSaver

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device on this machine")

SHAPES = [(400, 3584), (1296, 4096), (7056, 4096)]


@pytest.fixture(params=["embedded", "embedded-registered", "embedded-device", "daemon",
                        "daemon-tcp"])
def cache(request, tmp_path):
    if request.param == "daemon":
        c = ecstore.connect(request.getfixturevalue("daemon")["tcp"])
        assert c.transport == "shm" and c.register_with_cuda()  # the mapping, read-only
    elif request.param == "daemon-tcp":  # no pool here: puts and loads staged through host
        c = ecstore.connect(request.getfixturevalue("daemon")["tcp"], transport="tcp")
        assert c.transport == "tcp" and not c.capabilities["in_place_reads"]
    elif request.param == "embedded-device":
        c = ecstore.open(str(tmp_path / "s"), "256MiB", device_pool_size="192MiB")
    else:
        c = ecstore.open(str(tmp_path / "s"), "256MiB")
        if request.param == "embedded-registered":
            assert c.register_with_cuda()
    yield c
    c.close()


@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_tensor_round_trip(cache, shape):
    src = torch.randn(shape, device="cuda:0").to(torch.bfloat16)
    cache.put("ns", "k", src)
    got = cache.get("ns", "k", device="cuda:0")
    assert got.device == src.device and got.dtype == src.dtype
    assert torch.equal(got.view(torch.int16), src.view(torch.int16))


def test_a_load_follows_the_work_queued_on_the_current_stream(cache):
    """get(device=...) into a fresh tensor is ordered after the work already queued on the
    current stream: the caching allocator may hand it a block that queued work still reads,
    and that work must read its own bytes."""
    shape = (400, 3584)
    src = torch.randn(shape, device="cuda:0").to(torch.bfloat16)
    cache.put("ns", "k", src)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        old = torch.full(shape, 7, dtype=torch.bfloat16, device="cuda:0")
        torch.cuda._sleep(100_000_000)  # tens of ms of queued work before the read below
        total = old.float().sum()
        del old  # its block is free for the next allocation on this stream
        got = cache.get("ns", "k", device="cuda:0")
    side.synchronize()
    assert total.item() == 7 * shape[0] * shape[1]
    assert torch.equal(got.view(torch.int16), src.view(torch.int16))


def test_a_step_of_mixed_saves_and_loads_is_byte_exact(cache):
    """A video-like step: 24 frames of 0.5-3 MB saved through one AsyncSaver (handed over
    together) and loaded in one call, looked up and sized by rows; an absent one is None."""
    g = torch.Generator(device="cuda").manual_seed(3)
    items = {f"step-{i}": torch.randn(61 + (i * 97) % 306, 4096, device="cuda", generator=g)
             .to(torch.bfloat16) for i in range(24)}
    saver = AsyncSaver(cache, "ns")
    for k, t in items.items():
        saver.save(k, t)
    saver.wait()
    saver.close()
    keys = list(items) + ["never-saved"]
    got = transfer.get_many_to_device(cache, "ns", keys, torch.device("cuda:0"))
    assert got[-1] is None
    assert all(torch.equal(x, items[k]) for k, x in zip(list(items), got))
    rows = [t.shape[0] for t in items.values()]
    got = transfer.load_many(cache, "ns", list(items), "cuda:0", rows=rows)
    assert all(torch.equal(x, t) for x, t in zip(got, items.values()))


def test_load_many_brings_a_step_to_the_gpu(cache):
    srcs = [torch.randn(s, device="cuda:0").to(torch.bfloat16) for s in SHAPES[:2]]
    for i, src in enumerate(srcs):
        cache.put("ns", f"k{i}", src)
    got = transfer.load_many(cache, "ns", ["k0", "k1"], "cuda:0")
    for g, src in zip(got, srcs):
        assert g.is_cuda and torch.equal(g.view(torch.int16), src.view(torch.int16))
    with pytest.raises(ecstore.NotFound, match="absent"):
        transfer.load_many(cache, "ns", ["k0", "absent"], "cuda:0")


@pytest.mark.parametrize("where", ["embedded", "daemon"])
def test_load_many_streams_a_step_of_pool_and_disk_entries(where, tmp_path, request):
    """A step of entries only on disk and a pool hit, through the 64 MiB pool of an embedded
    store or a same-host daemon: load_many enqueues each host->device copy as the entry's
    bytes become readable (cache/device_load.h); every tensor lands byte for byte."""
    if where == "daemon":
        c = ecstore.connect(request.getfixturevalue("daemon")["unix"])
    else:
        c = ecstore.open(str(tmp_path / "s"), "64MiB")
    assert c.register_with_cuda()
    srcs = [torch.randn(1296, 4096, device="cuda:0").to(torch.bfloat16) for _ in range(8)]
    for i, src in enumerate(srcs):  # 85 MB through the 64 MiB pool: the first go to disk
        c.put("ns", f"k{i}", src)
    assert torch.equal(c.get("ns", "k7", device="cuda:0").view(torch.int16),
                       srcs[7].view(torch.int16))  # a daemon now known to lack a device tier
    assert c.lookup("ns", "k0").tier == "disk" and c.lookup("ns", "k1").tier == "disk"
    keys = ["k0", "k7", "k1"]
    got = transfer.load_many(c, "ns", keys, "cuda:0")
    for key, g in zip(keys, got):
        assert g.is_cuda and torch.equal(g.view(torch.int16), srcs[int(key[1])].view(torch.int16))
    with pytest.raises(ecstore.NotFound, match="absent"):
        transfer.load_many(c, "ns", ["k2", "absent"], "cuda:0")
    c.close()


def test_reserve_fills_pool_memory_in_place(tmp_path):
    c = ecstore.open(str(tmp_path / "r"), "64MiB")
    c.register_with_cuda()
    src = torch.randn(400, 3584, device="cuda:0").to(torch.bfloat16)
    r = c.reserve("ns", "k", "BF16", [400, 3584])
    torch.from_numpy(r.view()).copy_(src.view(-1).view(torch.uint8))
    r.commit()
    assert torch.equal(c.get("ns", "k", device="cuda:0").view(torch.int16),
                       src.view(torch.int16))
    c.close()


def test_async_saver_keeps_a_dropped_source_alive(cache):
    saver = AsyncSaver(cache, "ns")
    src = torch.randn(1296, 4096, device="cuda:0").to(torch.bfloat16)
    expect = src.clone()
    saver.save("k", src)
    del src  # the caller lets go at once; the allocator must not hand its memory out yet
    junk = [torch.full((1296, 4096), 7.0, device="cuda:0", dtype=torch.bfloat16)
            for _ in range(4)]
    saver.wait()
    del junk
    got = transfer.load(cache, "ns", "k", "cuda:0")
    assert torch.equal(got.view(torch.int16), expect.view(torch.int16))
    saver.close()


def test_device_tier_keeps_cuda_tensors_on_the_gpu(tmp_path):
    c = ecstore.open(str(tmp_path / "d"), "64MiB", device_pool_size="32MiB")
    src = torch.randn(1296, 4096, device="cuda:0").to(torch.bfloat16)  # 10.6 MB
    c.put("ns", "k", src)
    assert c.lookup("ns", "k").tiers == ["device"]
    with c.acquire_on_device("ns", "k") as lease:  # in place, no copy
        t = lease.tensor()
        assert t.is_cuda and torch.equal(t.view(torch.int16), src.view(torch.int16))
    got = c.get("ns", "k", device="cuda:0")  # device -> device
    assert torch.equal(got.view(torch.int16), src.view(torch.int16))
    host = c.get("ns", "k")  # device -> host
    assert torch.equal(host.view(torch.int16), src.cpu().view(torch.int16))
    # Pressure: 5 x 10.6 MB through a 32 MiB device pool demotes to the host pool.
    others = [torch.randn(1296, 4096, device="cuda:0").to(torch.bfloat16) for _ in range(5)]
    for i, o in enumerate(others):
        c.put("ns", f"o{i}", o)
    for i, o in enumerate(others):
        assert torch.equal(c.get("ns", f"o{i}", device="cuda:0").view(torch.int16),
                           o.view(torch.int16))
    assert c.stats()["device"]["spills"] > 0  # demoted device -> host
    c.close()


def test_same_host_daemon_device_pool_over_cuda_ipc(device_daemon):
    c = ecstore.connect(device_daemon["unix"])
    assert c.transport == "shm"
    src = torch.randn(400, 3584, device="cuda:0").to(torch.bfloat16)
    c.put("ns", "k", src)
    with c.acquire_on_device("ns", "k") as lease:  # the server's device pool, in place
        t = lease.tensor()
        assert t.is_cuda and torch.equal(t.view(torch.int16), src.view(torch.int16))
    assert c.stats()["leases"] == 1  # the view still holds it (views keep their lease)
    del t
    got = c.get("ns", "k", device="cuda:0")  # device -> device out of the server's pool
    assert torch.equal(got.view(torch.int16), src.view(torch.int16))
    assert "device" in c.lookup("ns", "k").tiers
    assert c.stats()["leases"] == 0
    c.close()


@pytest.mark.parametrize("device_puts", [False, True])
def test_async_saver_through_a_same_host_daemon(daemon, device_puts):
    """Saves through a same-host daemon: copied by the daemon out of this process's device
    memory (device_puts), or landing in the connection's put arena (registered with CUDA),
    across a reconnect (a first device get asks the daemon for a device tier it lacks, and
    the client reconnects: a new arena): every entry byte-exact. A registration that
    outlived its arena once sent these copies to pages nobody read."""
    c = ecstore.connect(daemon["tcp"])
    assert c.transport == "shm" and c.register_with_cuda()
    saver = AsyncSaver(c, "ns", device_puts=device_puts)
    for i, shape in enumerate(SHAPES + SHAPES):
        src = torch.randn(shape, device="cuda:0").to(torch.bfloat16)
        saver.save(f"k{i}", src)
        saver.wait()
        got = c.get("ns", f"k{i}", device="cuda:0")
        assert torch.equal(got.view(torch.int16), src.view(torch.int16)), (i, shape)
        assert torch.equal(c.get("ns", f"k{i}").view(torch.int16), src.cpu().view(torch.int16))
    assert saver.device_puts == (2 * len(SHAPES) if device_puts else 0)
    saver.close()
    c.close()


def test_a_same_host_daemon_copies_cuda_tensors_itself(daemon):
    """put() of a CUDA tensor through a same-host daemon that sees the GPU: the daemon opens
    the tensor's allocation over CUDA IPC and copies it into its host pool, from the
    middle of an allocation too (a view at an offset), and from a block the allocator
    hands out again."""
    c = ecstore.connect(daemon["unix"])
    assert c._device_puts()
    big = torch.randn(2, 1296, 4096, device="cuda:0").to(torch.bfloat16)
    for i in range(2):
        c.put("ns", f"half{i}", big[i])  # the second at an offset into the allocation
        assert c.lookup("ns", f"half{i}").tiers == ["pool"]
        assert torch.equal(c.get("ns", f"half{i}").view(torch.int16),
                           big[i].cpu().view(torch.int16))
    for r in range(3):  # freed and allocated again: the daemon must not read an old mapping
        src = torch.full((1296, 4096), float(r), device="cuda:0", dtype=torch.bfloat16)
        c.put("ns", f"again{r}", src)
        del src
        torch.cuda.empty_cache()
    for r in range(3):
        assert torch.all(c.get("ns", f"again{r}") == float(r))
    c.close()


@pytest.mark.parametrize("where", ["embedded", "daemon"])
def test_load_many_sized_by_rows_skips_the_lookup_and_checks_its_guess(where, tmp_path, request):
    """Told each entry's rows (as the connector is, by the scheduler's embed counts), a load
    of a namespace whose layout this process has seen sizes its buffers without looking the
    entries up; a wrong guess is looked up and read again, byte-exact, and not made again."""
    if where == "daemon":
        c = ecstore.connect(request.getfixturevalue("daemon")["unix"])
        c.put("warm", "k", torch.zeros(4, dtype=torch.bfloat16))
        c.get("warm", "k", device="cuda:0")  # a daemon now known to lack a device tier
    else:
        c = ecstore.open(str(tmp_path / "s"), "256MiB")
    assert c.register_with_cuda()
    rows = {"k0": 400, "k1": 1296, "k2": 2016}
    srcs = {k: torch.randn(r, 4096, device="cuda:0").to(torch.bfloat16) for k, r in rows.items()}
    for ns in ("ns", "other"):
        for k, src in srcs.items():
            c.put(ns, k, src)
    lookups = []
    real = c.lookup_many
    c.lookup_many = lambda ns, keys: lookups.append(list(keys)) or real(ns, keys)

    def load(ns, keys, guess):
        got = transfer.load_many(c, ns, keys, "cuda:0", rows=guess)
        for k, g in zip(keys, got):
            assert g.shape == srcs[k].shape and g.dtype == torch.bfloat16
            assert torch.equal(g.view(torch.int16), srcs[k].view(torch.int16))

    load("ns", ["k0"], [400])  # the layout is not known yet: looked up
    assert lookups == [["k0"]]
    load("ns", ["k1", "k2"], [1296, 2016])  # sized from the rows: no lookup
    assert lookups == [["k0"]]
    with pytest.raises(ecstore.NotFound, match="absent"):
        transfer.load_many(c, "ns", ["k1", "absent"], "cuda:0", rows=[1296, 5])
    lookups.clear()
    load("ns", ["k1", "k2"], [100, 2016])  # one too small: looked up and read again
    assert lookups == [["k1", "k2"]]
    load("ns", ["k0"], [400])  # no more guesses for "ns"
    assert lookups == [["k1", "k2"], ["k0"]]
    load("other", ["k0"], [400])
    lookups.clear()
    load("other", ["k1"], [2000])  # too large: a guess of another size is not kept either
    load("other", ["k2"], [2016])
    assert lookups == [["k1"], ["k2"]]
    c.close()


def _start_device_daemon(store, pool, device_pool):
    """`ec-store serve` of `store` with a device tier, started and listening."""
    import subprocess

    from conftest import _ec_store_bin
    proc = subprocess.Popen([_ec_store_bin(), "serve", "--dir", str(store), "--pool-size", pool,
                             "--device-pool-size", device_pool, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "port" in proc.stdout.readline()
    return proc


def test_a_daemon_with_a_device_tier_stops_after_gpu_reads_of_disk_entries(tmp_path):
    """Entries read onto the GPU through a daemon whose host copies were then evicted: the
    SIGTERM that follows persists nothing twice and ends (it once demoted them for ever)."""
    import signal
    import time

    store = tmp_path / "st"
    proc = _start_device_daemon(store, "64MiB", "128MiB")
    try:
        c = ecstore.connect(f"unix:{store}/serve.sock")
        tensors = [torch.randn(1024, 2048, device="cuda:0") for _ in range(24)]  # 8 MiB each
        for i, t in enumerate(tensors):
            c.put("ns", f"k{i}", t)
        c.flush()
        for i, t in enumerate(tensors):  # onto the GPU, from disk for most
            got = c.get("ns", f"k{i}", device="cuda:0")
            assert torch.equal(got, t)
        c.close()
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        assert rc == 0, proc.stderr.read()
        assert time.monotonic() - start < 60
    finally:
        if proc.poll() is None:
            proc.kill()
    with ecstore.open(str(store), "64MiB") as again:  # every entry there after the stop
        for i, t in enumerate(tensors):
            assert torch.equal(again.get("ns", f"k{i}").to("cuda:0"), t)


def test_concurrent_device_gets_through_a_daemon_never_fail_busy(tmp_path):
    """Three clients' device gets of large entries over a small device pool: where the
    device pool is full of leased entries, a get is served from the host pool instead of
    failing Busy."""
    import concurrent.futures
    import signal
    import subprocess

    store = tmp_path / "st"
    proc = _start_device_daemon(store, "512MiB", "128MiB")
    try:
        setup = ecstore.connect(f"unix:{store}/serve.sock")
        tensors = [torch.randn(1764, 8192, device="cuda:0").to(torch.bfloat16)
                   for _ in range(6)]  # 28.9 MB each
        for i, t in enumerate(tensors):
            setup.put("ns", f"k{i}", t)
        setup.close()

        def reader(n):
            c = ecstore.connect(f"unix:{store}/serve.sock")
            for r in range(8):
                i = (n + r) % len(tensors)
                got = c.get("ns", f"k{i}", device="cuda:0")
                assert torch.equal(got.view(torch.int16), tensors[i].view(torch.int16))
            c.close()

        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            for f in [ex.submit(reader, n) for n in range(3)]:
                f.result(timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
