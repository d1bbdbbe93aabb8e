"""EcStoreConnector against the real vLLM 0.33.0: tenants' salts scope their entries, and an
item the producer reported saved is a hit for a consumer that asks at once, while the save is
still landing -- on the producer's store and on another one."""

import threading
import time
from types import SimpleNamespace

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole  # noqa: E402

from ecstore.vllm import EcStoreConnector  # noqa: E402
from test_vllm_connector import (MockRequest, ask_until_ready, make_config,  # noqa: E402
                                 one_request)


def connector(store, role, producer=True, consumer=True, extra=None):
    return EcStoreConnector(make_config("ecstore", store, producer, consumer, extra), role)


def salted(req_id, keys, rows, salt):
    req = MockRequest(req_id, keys, rows)
    req.cache_salt = salt
    return req


# ------------------------------------------------------------------------ tenants

def test_salted_tenants_are_two_entries_and_never_hit_each_other(tmp_path):
    store = str(tmp_path / "s")
    sched = connector(store, ECConnectorRole.SCHEDULER)
    worker = connector(store, ECConnectorRole.WORKER)
    image = torch.randn(100, 64).to(torch.bfloat16)

    def run(req_id, salt):
        """One request through the hooks; whether its item was a hit (of the same bytes)."""
        hit, got = one_request(sched, worker, salted(req_id, ["img"], [100], salt), "img", image)
        assert torch.equal(got, image)
        return hit

    try:
        assert not run("a1", "tenant-a")
        assert not run("b1", "tenant-b"), "tenant b hit tenant a's entry"
        assert run("a2", "tenant-a") and run("b2", "tenant-b")
        assert not run("plain", None)  # unsalted requests share their own entry
        keys = sorted(e.key for e in sched.cache.list("test"))
        assert len(keys) == 3 and "img" in keys
        assert not any("tenant" in k for k in keys)  # the salt is hashed, never stored
        _, params = sched.request_finished(salted("p", ["img"], [100], "tenant-a"))
        assert params["img"]["ec_store"]["key"] in keys  # a consumer elsewhere pulls that
    finally:
        sched.shutdown()
        worker.shutdown()


def test_salting_can_be_turned_off(tmp_path):
    sched = connector(str(tmp_path / "s"), ECConnectorRole.SCHEDULER, extra={"tenant_salt": False})
    try:
        sched.cache.put("test", "img", torch.randn(10, 64).to(torch.bfloat16))
        req = salted("r", ["img"], [10], "tenant-a")
        assert ask_until_ready(sched, req) and sched.has_cache_item("img")
        sched.request_finished(req)
    finally:
        sched.shutdown()


# ---------------------------------------------------------- what the producer reported

SIZES_MB = (2.87, 10.6, 16.5, 57.8)  # encoder outputs of common image sizes


def outputs():
    width = 3584  # bf16 rows of a 7B model's hidden size
    return {f"img{i}": torch.randn(int(mb * 1e6) // (2 * width), width).to(torch.bfloat16)
            for i, mb in enumerate(SIZES_MB)}


def hold_saves(conn):
    """Holds the producer's save thread until the returned event is set: its saves are
    "still landing" for as long as the test needs."""
    gate = threading.Event()
    saver = conn._saver
    put_batch = saver._put_batch
    saver._put_batch = lambda batch: (gate.wait(30), put_batch(batch))
    return gate


def consume(sched, req, gate=None, hold_s=0.2):
    """Asks as vLLM does, once a step; with a gate, keeps asking while the saves are held
    (the request must not be ready, nor its items decided misses), then lets them land."""
    if gate is not None:
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            assert not sched.ensure_cache_available(req, 0), "ready before its saves landed"
            time.sleep(0.005)
        gate.set()
    assert ask_until_ready(sched, req, steps=5000)
    return [sched.has_cache_item(f.identifier) for f in req.mm_features]


@pytest.mark.parametrize("held", [False, True], ids=["at-once", "held"])
def test_items_the_producer_reported_saved_are_hits_on_its_store(big_daemon, held):
    producer = connector(big_daemon["unix"], ECConnectorRole.WORKER, consumer=False)
    sched = connector(big_daemon["unix"], ECConnectorRole.SCHEDULER, producer=False)
    gate = hold_saves(producer) if held else None
    try:
        made = outputs()
        for key in made:  # returns at once: the saves land on the producer's save thread
            producer.save_caches(encoder_cache=made, mm_hash=key)
        keys = list(made)
        rows = [made[k].shape[0] for k in keys]
        _, params = producer.request_finished(MockRequest("p", keys, rows))
        req = MockRequest("c", keys, rows)
        req.ec_transfer_params = params
        assert consume(sched, req, gate) == [True] * len(keys), "an item was recomputed"
        stats = sched.get_ec_connector_stats().reduce()
        assert stats["hits"] == len(keys) and "misses" not in stats
        if held:
            assert stats["saved_waits"] == len(keys)
        sched.request_finished(req)
    finally:
        if gate is not None:
            gate.set()  # a failed check must not leave the save thread held
        producer.shutdown()
        sched.shutdown()


def test_an_item_reported_saved_that_never_lands_is_computed_after_the_wait(tmp_path):
    sched = connector(str(tmp_path / "s"), ECConnectorRole.SCHEDULER,
                      extra={"saved_wait_ms": 200})
    try:
        req = MockRequest("c", ["lost"], [10])
        req.ec_transfer_params = {"lost": {"ec_store": {"store": f"dir:{tmp_path / 's'}",
                                                        "namespace": "test"}}}
        started = time.monotonic()
        assert not sched.ensure_cache_available(req, 0)
        assert ask_until_ready(sched, req, steps=5000)
        assert time.monotonic() - started >= 0.2
        assert not sched.has_cache_item("lost")
        assert sched.take_unavailable_requests() == set()  # a miss, not a failure
    finally:
        sched.shutdown()


def test_a_save_still_landing_on_the_producers_store_is_pulled_once_it_lands(tmp_path, daemon):
    producer = connector(daemon["tcp"], ECConnectorRole.WORKER, consumer=False)
    local = str(tmp_path / "pd-store")  # the consumer's own store, "another host"
    sched = connector(local, ECConnectorRole.SCHEDULER, producer=False)
    worker = connector(local, ECConnectorRole.WORKER, producer=False)
    gate = hold_saves(producer)
    try:
        t = torch.randn(300, 64).to(torch.bfloat16)
        producer.save_caches(encoder_cache={"img": t}, mm_hash="img")
        _, params = producer.request_finished(MockRequest("p", ["img"], [300]))
        req = MockRequest("c", ["img"], [300])
        req.ec_transfer_params = params
        assert consume(sched, req, gate) == [True]
        assert sched.take_unavailable_requests() == set()
        sched.update_state_after_alloc(req, 0)
        worker.bind_connector_metadata(sched.build_connector_meta(SimpleNamespace()))
        cache = {}
        worker.start_load_caches(encoder_cache=cache)
        assert torch.equal(cache["img"], t)
    finally:
        gate.set()
        for c in (producer, sched, worker):
            c.shutdown()
