"""The encoder on GPU 0, prefill on GPU 1: entries saved from one GPU and loaded into the
other, byte-exact, by a peer copy out of the device tier where the pair can reach each other
(stats()["transfer"] counts peer_copies and host_path_copies). On the GPU machine by
`make test-gpu`; with fewer than two GPUs these skip and say so."""

import pytest
import torch

import ecstore
from ecstore import transfer
from ecstore.transfer import AsyncSaver

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs two GPUs, this machine has {torch.cuda.device_count()}: "
           "run `make test-gpu` on a two-GPU machine for the cross-GPU loads")

FRAME = (350, 4096)  # 2.87 MB of bf16
IMAGE = (1296, 4096)  # 10.6 MB


def _peer_possible() -> bool:
    return torch.cuda.can_device_access_peer(1, 0)


def _cross_gpu(c) -> tuple[int, int]:
    t = c.stats()["transfer"]
    return t["peer_copies"], t["host_path_copies"]


@pytest.fixture(params=["embedded-device", "daemon-device"])
def cache(request, tmp_path):
    if request.param == "daemon-device":
        c = ecstore.connect(request.getfixturevalue("device_daemon")["unix"])
    else:
        c = ecstore.open(str(tmp_path / "s"), "256MiB", device_pool_size="128MiB")
    yield c
    c.close()


def test_a_step_saved_on_gpu0_loads_onto_gpu1_by_peer_copy(cache):
    """A producer's saves through the connector's saver on GPU 0, a consumer's load_many
    into GPU 1: every item byte-exact, each a peer copy from the device tier (or the host
    path where this pair cannot reach each other), none through a staged host buffer."""
    srcs = [torch.randn(FRAME if i % 2 else IMAGE, device="cuda:0").to(torch.bfloat16)
            for i in range(6)]
    saver = AsyncSaver(cache, "ns")
    for i, s in enumerate(srcs):
        saver.save(f"k{i}", s)
    saver.close()
    assert all("device" in cache.lookup("ns", f"k{i}").tiers for i in range(6))
    peer0, host0 = _cross_gpu(cache)
    got = transfer.load_many(cache, "ns", [f"k{i}" for i in range(6)], "cuda:1",
                             rows=[s.shape[0] for s in srcs])
    for g, s in zip(got, srcs):
        assert g.device == torch.device("cuda:1")
        assert torch.equal(g.cpu().view(torch.int16), s.cpu().view(torch.int16))
    peer1, host1 = _cross_gpu(cache)
    if _peer_possible():
        assert (peer1 - peer0, host1 - host0) == (6, 0)
    else:
        assert (peer1 - peer0, host1 - host0) == (0, 6)


def test_get_onto_the_other_gpu_and_a_lease_read_from_it(cache):
    src = torch.randn(IMAGE, device="cuda:0").to(torch.bfloat16)
    cache.put("ns", "k", src)
    got = cache.get("ns", "k", device="cuda:1")
    assert got.device == torch.device("cuda:1")
    assert torch.equal(got.cpu().view(torch.int16), src.cpu().view(torch.int16))
    with cache.acquire_on_device("ns", "k") as lease:  # in the pool, on GPU 0
        t = lease.tensor()
        assert t.device == torch.device("cuda:0")
        on1 = t.to("cuda:1")  # read from the other GPU while held
        assert torch.equal(on1.cpu().view(torch.int16), src.cpu().view(torch.int16))
        del t


def test_a_daemons_pool_on_gpu1_serves_gpu0(tmp_path):
    from conftest import _serve

    for d in _serve(tmp_path, "--device-pool-size", "64MiB", "--device-pool-gpu", "1"):
        c = ecstore.connect(d["unix"])
        src = torch.randn(FRAME, device="cuda:0").to(torch.bfloat16)
        c.put("ns", "k", src)
        with c.acquire_on_device("ns", "k") as lease:
            assert lease.tensor().device == torch.device("cuda:1"), "--device-pool-gpu's GPU"
        got = c.get("ns", "k", device="cuda:0")
        assert torch.equal(got.view(torch.int16), src.view(torch.int16))
        c.close()
