"""A step's many items in one batched call (ecstore.transfer.get_many_to_device, what the
connector's start_load_caches runs), on CPU tensors: video-like steps of many mixed-size
items load byte-exact through the connector; an absent item is reported as such and the
rest load; a batch larger than the pool is served (its disk reads go in rounds). A step's
saves are handed over together (AsyncSaver: one put_many_from_buffers call for what was
queued) and each is answered alone. Embedded and through a daemon. (The CUDA side runs in
`make test-gpu`: test_cuda.py.)"""
import threading

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

import ecstore  # noqa: E402
from conftest import _serve  # noqa: E402
from ecstore import transfer  # noqa: E402
from ecstore.transfer import AsyncSaver  # noqa: E402
from test_vllm_connector import Engine, MockRequest  # noqa: E402


@pytest.fixture(params=["embedded", "daemon"])
def small_pool(request, tmp_path):
    """A cache whose pool (16 MiB) is smaller than the batches below."""
    if request.param == "embedded":
        c = ecstore.open(str(tmp_path / "s"), pool_size="16MiB")
        yield c
        c.close()
        return
    for d in _serve(tmp_path, pool_size="16MiB"):
        c = ecstore.connect(d["unix"])
        yield c
        c.close()


def _frames(n, seed=0):
    """n encoder outputs of 0.5-3 MB (bf16, width 1024), as a video's frames vary."""
    g = torch.Generator().manual_seed(seed)
    return {f"frame-{seed}-{i}": torch.randn(256 + (i * 389) % 1280, 1024, generator=g)
            .to(torch.bfloat16) for i in range(n)}


def test_a_batch_with_an_absent_item_loads_the_rest_and_says_which(small_pool):
    items = _frames(6)
    for k, t in items.items():
        small_pool.put("ns", k, t)
    keys = list(items)
    keys.insert(3, "never-saved")
    got = transfer.get_many_to_device(small_pool, "ns", keys, torch.device("cpu"))
    assert got[3] is None
    assert all(torch.equal(g, items[k]) for k, g in zip(keys, got) if k != "never-saved")
    with pytest.raises(ecstore.NotFound, match="never-saved"):
        transfer.load_many(small_pool, "ns", keys, "cpu")


def test_a_batch_larger_than_the_pool_is_served(small_pool):
    items = _frames(24, seed=1)  # ~36 MB through a 16 MiB pool: most are on disk only
    for k, t in items.items():
        small_pool.put("ns", k, t)
    small_pool.flush()
    keys = list(items)
    rows = [items[k].shape[0] for k in keys]
    for sized in (None, rows):  # looked up first, and sized by the scheduler's embed counts
        got = transfer.get_many_to_device(small_pool, "ns", keys, torch.device("cpu"), sized)
        assert all(torch.equal(g, items[k]) for k, g in zip(keys, got))


@pytest.mark.parametrize("n", [1, 8, 32])
def test_a_step_of_many_mixed_items_loads_byte_exact_through_the_connector(tmp_path, n):
    e = Engine("ecstore", str(tmp_path / "store"))
    try:
        items = _frames(n, seed=n)
        for k, t in items.items():
            e.save({k: t}, k)
        req = MockRequest("video", list(items), [t.shape[0] for t in items.values()])
        hits, meta = e.schedule(req)
        assert hits == [True] * n
        loaded = e.load(meta)
        assert set(loaded) == set(items)
        assert all(torch.equal(loaded[k], t) for k, t in items.items())
        e.scheduler.request_finished(req)
    finally:
        e.close()


def test_a_steps_saves_are_put_together_and_a_bad_one_fails_alone(small_pool):
    items = _frames(12, seed=7)
    first, busy, queued = next(iter(items)), threading.Event(), threading.Event()
    saved, failed = [], []

    def on_saved(key, nbytes, seconds):
        saved.append(key)
        if key == first:  # the worker holds here until the step is queued behind it
            busy.set()
            queued.wait(10)

    saver = AsyncSaver(small_pool, "ns", on_error=lambda k, e: failed.append((k, e)),
                       on_saved=on_saved)
    saver.save(first, items[first])
    assert busy.wait(10)
    for k, t in list(items.items())[1:]:
        saver.save(k, t)
    saver.save("bad\nkey", items[first])
    queued.set()
    saver.wait()
    assert saver.batches == 2  # the first save alone, then the 12 queued behind it
    assert saved == list(items)
    assert [k for k, _ in failed] == ["bad\nkey"]
    assert isinstance(failed[0][1], ecstore.InvalidArgument)
    got = transfer.load_many(small_pool, "ns", list(items), "cpu")
    assert all(torch.equal(g, t) for g, t in zip(got, items.values()))
    saver.close()


def test_without_on_error_wait_raises_a_failed_save_and_the_rest_are_in(small_pool):
    saver = AsyncSaver(small_pool, "ns")
    t = torch.ones(64, 1024, dtype=torch.bfloat16)
    for k in ("a", "bad\nkey", "b"):
        saver.save(k, t)
    with pytest.raises(ecstore.InvalidArgument):
        saver.wait()
    saver.wait()  # told once
    assert all(torch.equal(small_pool.get("ns", k), t) for k in ("a", "b"))
    saver.close()
    with pytest.raises(ecstore.InvalidArgument, match="closed"):
        saver.save("c", t)
