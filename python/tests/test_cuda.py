"""CUDA tensors in and out (byte-exact), on a machine with a GPU. CI has none: these skip
there, saying so; they run on the GPU machine by hand (see README, Figures)."""

import pytest
import torch

import ecstore
from ecstore import transfer
from ecstore.transfer import AsyncSaver

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device on this machine")

SHAPES = [(400, 3584), (1296, 4096), (7056, 4096)]


@pytest.fixture(params=["embedded", "embedded-registered", "daemon"])
def cache(request, tmp_path):
    if request.param == "daemon":
        c = ecstore.connect(request.getfixturevalue("daemon")["tcp"])
        assert c.transport == "shm" and c.register_with_cuda()  # the mapping, read-only
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
