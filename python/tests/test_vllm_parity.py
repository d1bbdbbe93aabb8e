"""EcStoreConnector against the behaviours a store-backed EC connector for vLLM is held to
(each a test named for it), with vLLM 0.33.0's classes: lookups off the scheduler thread,
local answers to has_cache_item, one pin per item across requests, preemption, cleanup of
finished requests, merged loads and saves, failed saves, request_finished's metadata, and
the base class's methods (scripts/check_vllm_connector_api.py)."""

import importlib.util
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

from vllm.distributed.ec_transfer.ec_connector.utils import (  # noqa: E402
    PlaceholderMetadataResolver, collect_ec_item_metadata)

import ecstore  # noqa: E402
from test_vllm_connector import Engine, MockRequest, ask_until_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def engine(tmp_path):
    e = Engine("ecstore", str(tmp_path / "store"))
    yield e
    e.close()


def _no_leases(cache, timeout=10.0):
    """Whether the store's leases drop to none (pins are released on a thread of the
    connector's, after the hook that dropped them returns)."""
    deadline = time.monotonic() + timeout
    while cache.stats()["leases"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return cache.stats()["leases"] == 0


def _saved(e, n=3):
    items = {f"img{i}": torch.randn(8 + i, 16, dtype=torch.bfloat16) for i in range(n)}
    for k, t in items.items():
        e.save({k: t}, k)
    return items


def _counting_pins(cache):
    """Counts the store's pin calls (and the threads they ran on); `gate` holds them."""
    calls, gate, real = [], threading.Event(), cache.pin

    def pin(ns, key):
        gate.wait(30)
        calls.append((key, threading.current_thread().name))
        return real(ns, key)

    cache.pin = pin
    return calls, gate


def test_parity_the_lookup_is_one_batch_off_the_scheduler_and_defers_the_request(engine):
    items = _saved(engine)
    calls, gate = _counting_pins(engine.scheduler.cache)
    req = MockRequest("r", list(items), [t.shape[0] for t in items.values()])
    for _ in range(3):  # pending: the request is deferred, the hook does not wait
        assert engine.scheduler.ensure_cache_available(req, 0) is False
    gate.set()
    assert ask_until_ready(engine.scheduler, req)
    assert sorted(k for k, _ in calls) == sorted(items)
    assert {t for _, t in calls} == {"ecstore-lookup_0"}  # one task for the batch, off-thread
    engine.scheduler.request_finished(req)


def test_parity_has_cache_item_answers_from_local_state_only(engine):
    items = _saved(engine, 1)
    req = MockRequest("r", list(items) + ["absent"], [8, 4])
    assert ask_until_ready(engine.scheduler, req)

    def no_io(*args, **kwargs):
        raise AssertionError("has_cache_item called the store")

    cache = engine.scheduler.cache
    for name in ("pin", "get", "contains", "lookup", "contains_many", "claim"):
        setattr(cache, name, no_io)
    assert engine.scheduler.has_cache_item("img0") is True
    assert engine.scheduler.has_cache_item("absent") is False
    for name in ("pin", "get", "contains", "lookup", "contains_many", "claim"):
        delattr(cache, name)
    engine.scheduler.request_finished(req)


def test_parity_concurrent_waiters_for_one_item_share_one_lookup_and_one_pin(engine):
    _saved(engine, 1)
    calls, gate = _counting_pins(engine.scheduler.cache)
    a, b = MockRequest("a", ["img0"], [8]), MockRequest("b", ["img0"], [8])
    assert engine.scheduler.ensure_cache_available(a, 0) is False  # asking
    assert engine.scheduler.ensure_cache_available(b, 0) is False  # waits for a's answer
    gate.set()
    assert ask_until_ready(engine.scheduler, a) and ask_until_ready(engine.scheduler, b)
    assert [k for k, _ in calls] == ["img0"]
    assert engine.scheduler.has_cache_item("img0")
    engine.scheduler.request_finished(a)
    engine.scheduler.ensure_cache_available(b, 0)  # vLLM asks has_cache_item after ensure
    assert engine.scheduler.has_cache_item("img0")  # b's use keeps the pin
    engine.scheduler.request_finished(b)
    assert _no_leases(engine.scheduler.cache)


def test_parity_a_preempted_request_keeps_its_hits_and_asks_again_for_its_misses(engine):
    items = _saved(engine, 1)
    fresh = torch.randn(5, 16, dtype=torch.bfloat16)
    req = MockRequest("r", ["img0", "fresh"], [8, 5])
    hits, meta = engine.schedule(req)
    assert hits == [True, False]
    engine.scheduler.update_state_after_alloc(req, 1)  # computed here, as vLLM allocates it
    engine.save({"fresh": fresh}, "fresh")
    # Asked about again while running (a chunked prefill's next step): nothing changes.
    assert engine.scheduler.ensure_cache_available(req, 0) is True
    assert not engine.scheduler.has_cache_item("fresh")
    # Preempted: vLLM frees the worker's encoder outputs, counts the preemption and tells
    # the connector nothing; the request waits, and is asked about again.
    req.num_preemptions = 1
    hits, meta = engine.schedule(req)
    assert hits == [True, True]
    loaded = engine.load(meta)
    assert torch.equal(loaded["img0"], items["img0"]) and torch.equal(loaded["fresh"], fresh)
    engine.scheduler.request_finished(req)
    assert _no_leases(engine.scheduler.cache)


def test_parity_a_finished_requests_waits_and_pins_are_cleaned_up(engine):
    _saved(engine, 1)
    store = engine.scheduler._spec
    req = MockRequest("r", ["img0", "landing"], [8, 4])
    req.ec_transfer_params = {"landing": {"ec_store": {"store": store, "namespace": "test"}}}
    for _ in range(20):  # "landing" is reported saved and absent: the request waits
        assert engine.scheduler.ensure_cache_available(req, 0) is False
    engine.scheduler.request_finished(req)
    sched = engine.scheduler._sched
    assert not sched._waits and not sched._decided and not sched._pins
    assert _no_leases(engine.scheduler.cache)


def test_parity_a_load_and_a_save_of_one_item_in_one_step_are_merged(engine):
    items = _saved(engine, 1)
    req = MockRequest("r", ["img0"], [8])
    _, meta = engine.schedule(req)
    producer_side = engine.worker  # as an ec_both worker: loads the item, is told to save it
    producer_side._is_producer = True
    producer_side.bind_connector_metadata(meta)
    cache = {}
    producer_side.start_load_caches(encoder_cache=cache)
    producer_side.save_caches(encoder_cache=cache, mm_hash="img0")
    producer_side.wait_for_saves()
    producer_side.clear_connector_metadata()
    stats = producer_side.get_ec_connector_stats().data
    assert stats.get("saves_merged") == 1 and "saves" not in stats
    assert torch.equal(cache["img0"], items["img0"])
    engine.scheduler.request_finished(req)


def test_parity_a_failed_save_is_logged_and_counted_never_raised(tmp_path, caplog):
    e = Engine("ecstore", str(tmp_path / "s"), {"pool_size": "16MiB", "disk_quota": "20MiB"})
    huge = torch.zeros(48, 1024, 1024, dtype=torch.uint8)  # larger than the pool and disk
    e.producer.save_caches(encoder_cache={"huge": huge}, mm_hash="huge")
    e.producer.wait_for_saves()  # nothing raised
    assert e.producer.get_ec_connector_stats().data.get("save_errors") == 1
    assert any("saving huge failed" in r.getMessage() for r in caplog.records)
    e.close()


def test_parity_request_finished_returns_vllms_item_metadata_with_the_store(engine):
    req = MockRequest("r", ["a", "b", "a"], [3, 4, 3])
    delay, params = engine.producer.request_finished(req)
    assert delay is False
    expected = collect_ec_item_metadata(req.mm_features, PlaceholderMetadataResolver(None))
    for ident, item in expected.items():
        got = dict(params[ident])
        assert got.pop("ec_store") == {"store": engine.scheduler._spec, "namespace": "test"}
        assert got == item  # modality, item_indices, placeholder metadata
    assert params["a"]["item_indices"] == [0, 2]


def test_parity_receive_addresses_is_served_with_none(engine):
    assert engine.scheduler.receive_addresses() == []


def test_parity_the_connector_has_every_method_of_the_installed_base(capsys):
    """The script fails loudly on a new abstract method, or on a base method whose
    signature the connector's override no longer accepts (run here in-process: vLLM is
    imported already)."""
    spec = importlib.util.spec_from_file_location(
        "check_vllm_connector_api", ROOT / "scripts" / "check_vllm_connector_api.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.main() == 0, capsys.readouterr().err
    assert "EcStoreConnector covers ECConnectorBase" in capsys.readouterr().out
