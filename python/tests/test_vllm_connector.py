"""EcStoreConnector against the real vLLM 0.33.0.

The behaviours of vLLM's tests/v1/ec_connector/unit/test_ec_example_connector.py, ported to
the public connector API and run over both connectors (vLLM's ECExampleConnector and
EcStoreConnector), plus what only a pinning connector can promise; and vLLM's worker-side
wrapper (ActiveECConnector) driving the real EcStoreConnector.
"""

import logging
import re
from types import SimpleNamespace
from unittest.mock import Mock, patch

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

from vllm.config import VllmConfig  # noqa: E402
from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole  # noqa: E402
from vllm.distributed.ec_transfer.ec_connector.example_connector import (  # noqa: E402
    ECExampleConnector)
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange  # noqa: E402

import ecstore  # noqa: E402
from ecstore.vllm import EcStoreConnector  # noqa: E402


class MockRequest:  # as in vLLM's test
    def __init__(self, request_id, mm_hashes, token_counts):
        self.request_id = request_id
        self._token_counts = token_counts
        self.mm_features = [
            MultiModalFeatureSpec(data=None, modality="image", identifier=h,
                                  mm_position=PlaceholderRange(offset=0, length=n))
            for h, n in zip(mm_hashes, token_counts)]

    def get_num_encoder_embeds(self, input_id):
        return self._token_counts[input_id]


def ask_until_ready(sched, request, steps=500):
    """ensure_cache_available as vLLM's scheduler asks it: once a step until it is ready."""
    import time

    for _ in range(steps):
        if sched.ensure_cache_available(request, 0):
            return True
        time.sleep(0.002)
    return False


def one_request(sched, worker, req, ident, image):
    """A request for one item through the hooks as vLLM drives them: loaded where the store
    has it, else computed (`image`) and saved as the worker saves it. (Whether it hit, the
    tensor the worker loaded or saved.)"""
    from types import SimpleNamespace

    assert ask_until_ready(sched, req)
    hit = sched.has_cache_item(ident)
    sched.update_state_after_alloc(req, 0)
    worker.bind_connector_metadata(sched.build_connector_meta(SimpleNamespace()))
    cache = {}
    if hit:
        worker.start_load_caches(encoder_cache=cache)
    else:
        cache[ident] = image
        worker.save_caches(encoder_cache=cache, mm_hash=ident)
        worker.wait_for_saves()
    worker.clear_connector_metadata()
    sched.update_state_after_free(req, 0)
    sched.request_finished(req)
    return hit, cache.get(ident)


def make_config(kind, store, producer, consumer, extra=None):
    config = Mock(spec=VllmConfig)
    config.model_config = None
    ec = Mock()
    ec.is_ec_producer = producer
    ec.is_ec_consumer = consumer
    extra = dict(extra or {})
    if kind == "ecstore":
        extra.setdefault("store", f"dir:{store}" if store.startswith("/") else store)
        extra.setdefault("namespace", "test")
        extra.setdefault("lookup_budget_ms", 10000)  # a loaded test machine: no timed misses
    else:
        extra.setdefault("shared_storage_path", store)
    ec.ec_connector_extra_config = extra
    ec.get_from_extra_config = lambda k, d=None: extra.get(k, d)
    config.ec_transfer_config = ec
    return config


CLASSES = {"example": ECExampleConnector, "ecstore": EcStoreConnector}


class Engine:
    """A producer and a consumer (scheduler + worker side each) on one store."""

    def __init__(self, kind, store, extra=None):
        cls = CLASSES[kind]
        self.kind = kind
        self.producer = cls(make_config(kind, store, True, False, extra), ECConnectorRole.WORKER)
        self.scheduler = cls(make_config(kind, store, False, True, extra),
                             ECConnectorRole.SCHEDULER)
        self.worker = cls(make_config(kind, store, False, True, extra), ECConnectorRole.WORKER)

    def save(self, cache, key):
        self.producer.save_caches(encoder_cache=cache, mm_hash=key)
        if self.kind == "ecstore":
            self.producer.wait_for_saves()

    def schedule(self, request):
        """What vLLM's scheduler does for a waiting request: ensure (step after step until
        it is ready), has, alloc, meta."""
        assert ask_until_ready(self.scheduler, request)
        hits = [self.scheduler.has_cache_item(f.identifier) for f in request.mm_features]
        for i, hit in enumerate(hits):
            if hit:
                self.scheduler.update_state_after_alloc(request, i)
        return hits, self.scheduler.build_connector_meta(SimpleNamespace())

    def load(self, meta, encoder_cache=None):
        encoder_cache = {} if encoder_cache is None else encoder_cache
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_caches(encoder_cache=encoder_cache)
        self.worker.clear_connector_metadata()
        return encoder_cache

    def close(self):
        for c in (self.producer, self.scheduler, self.worker):
            c.shutdown()


@pytest.fixture(params=["example", "ecstore-embedded", "ecstore-daemon"])
def engine(request, tmp_path):
    if request.param == "example":
        e = Engine("example", str(tmp_path))
    elif request.param == "ecstore-embedded":
        e = Engine("ecstore", str(tmp_path / "store"))
    else:
        e = Engine("ecstore", request.getfixturevalue("daemon")["tcp"])
    yield e
    e.close()


def tensors(n=3):
    return {f"img_hash_{i}": torch.randn(100 + 50 * i, 64, dtype=torch.bfloat16)
            for i in range(1, n + 1)}


def test_roles(engine):
    assert engine.producer.is_producer and not engine.producer.is_consumer
    assert engine.scheduler.is_consumer and not engine.scheduler.is_producer
    assert engine.scheduler.role == ECConnectorRole.SCHEDULER


def test_saved_items_are_hits_and_load_byte_exact(engine):
    cache = tensors()
    for k in cache:
        engine.save(cache, k)
    req = MockRequest("r1", list(cache), [150, 200, 250])  # their embed counts
    hits, meta = engine.schedule(req)
    assert hits == [True, True, True]
    loaded = engine.load(meta)
    assert set(loaded) == set(cache)
    for k, t in cache.items():
        assert loaded[k].dtype == t.dtype and torch.equal(loaded[k], t)


def test_no_items_exist(engine):
    hits, meta = engine.schedule(MockRequest("r", ["a", "b"], [1, 2]))
    assert hits == [False, False]
    assert engine.load(meta) == {}


def test_partial_hits_load_only_what_exists(engine):
    cache = tensors(2)
    engine.save(cache, "img_hash_1")
    hits, meta = engine.schedule(MockRequest("r", ["img_hash_1", "img_hash_2"], [150, 200]))
    assert hits == [True, False]
    assert list(engine.load(meta)) == ["img_hash_1"]


def test_metadata_is_cleared_after_build(engine):
    cache = tensors(1)
    engine.save(cache, "img_hash_1")
    _, meta = engine.schedule(MockRequest("r", ["img_hash_1"], [150]))
    assert list(engine.load(meta)) == ["img_hash_1"]
    empty = engine.scheduler.build_connector_meta(SimpleNamespace())
    assert engine.load(empty) == {}


def test_consumer_does_not_save(engine):
    cache = tensors(1)
    engine.worker.save_caches(encoder_cache=cache, mm_hash="img_hash_1")
    hits, _ = engine.schedule(MockRequest("r", ["img_hash_1"], [150]))
    assert hits == [False]


def test_load_skips_keys_already_in_the_encoder_cache(engine):
    cache = tensors(1)
    engine.save(cache, "img_hash_1")
    _, meta = engine.schedule(MockRequest("r", ["img_hash_1"], [150]))
    sentinel = torch.zeros(1)
    loaded = engine.load(meta, {"img_hash_1": sentinel})
    assert loaded["img_hash_1"] is sentinel


def test_save_of_an_empty_tensor(engine):
    cache = {"empty": torch.empty(0, 64, dtype=torch.bfloat16)}
    engine.save(cache, "empty")
    hits, meta = engine.schedule(MockRequest("r", ["empty"], [0]))
    assert hits == [True]
    assert engine.load(meta)["empty"].shape == (0, 64)


# ------------------------------------------------------------ what only ec-store promises

def test_a_hit_survives_eviction_until_it_is_freed(tmp_path):
    """Between has_cache_item and the worker's load the pool churns: the pinned hit stays
    loadable (ECExampleConnector never evicts; a bounded store must pin)."""
    e = Engine("ecstore", str(tmp_path / "s"), {"pool_size": "16MiB", "disk_quota": "20MiB"})
    big = {"hit": torch.randn(1024, 1024, dtype=torch.float32)}  # 4 MiB
    e.save(big, "hit")
    req = MockRequest("r", ["hit"], [1024])
    hits, meta = e.schedule(req)
    assert hits == [True]
    for i in range(12):  # 48 MiB through a 16 MiB pool and a 20 MiB disk quota
        e.save({f"churn{i}": torch.randn(1024, 1024)}, f"churn{i}")
    loaded = e.load(meta)
    assert torch.equal(loaded["hit"], big["hit"])
    e.scheduler.update_state_after_free(req, 0)
    assert not e.scheduler.has_cache_item("hit")  # unpinned once freed
    e.scheduler.request_finished(req)
    e.close()


def test_request_finished_reports_where_the_items_live(tmp_path):
    e = Engine("ecstore", str(tmp_path / "s"))
    req = MockRequest("r", ["x"], [1])
    delay, params = e.producer.request_finished(req)
    assert delay is False
    assert params["x"]["ec_store"] == {"store": f"dir:{tmp_path / 's'}", "namespace": "test"}
    e.close()


def test_the_connectors_logs_go_through_vllms_logger(tmp_path):
    e = Engine("ecstore", str(tmp_path / "s"))
    seen = []

    class Seen(logging.Handler):
        def emit(self, record):
            seen.append(record.name)

    theirs = logging.getLogger("vllm")
    handler = Seen(logging.WARNING)
    theirs.addHandler(handler)
    try:
        logging.getLogger("ecstore.lookups").warning("through vLLM's handlers")
    finally:
        theirs.removeHandler(handler)
        e.close()
    assert seen == ["ecstore.lookups"]


def test_an_unreachable_store_is_refused_at_startup_only_without_fail_open(caplog):
    conf = make_config("ecstore", "tcp://127.0.0.1:1", False, True, {"fail_open": False})
    with pytest.raises(ecstore.Unavailable):
        EcStoreConnector(conf, ECConnectorRole.SCHEDULER)
    # fail_open (the default): it starts, says so, and its items are misses meanwhile
    conf = make_config("ecstore", "tcp://127.0.0.1:1", False, True)
    with caplog.at_level(logging.WARNING):
        c = EcStoreConnector(conf, ECConnectorRole.SCHEDULER)
    assert "items are misses until it answers" in caplog.text
    assert not c.has_cache_item("x")
    with pytest.raises(ecstore.Unavailable):
        c.cache.contains(c.namespace, "x")
    c.shutdown()


def test_default_namespace_separates_models():
    from ecstore.vllm import default_namespace

    a = SimpleNamespace(model_config=SimpleNamespace(model="Qwen/Qwen2.5-VL-7B", revision=None,
                                                     dtype="bfloat16"))
    b = SimpleNamespace(model_config=SimpleNamespace(model="Qwen/Qwen2.5-VL-3B", revision=None,
                                                     dtype="bfloat16"))
    assert default_namespace(a) != default_namespace(b)
    assert default_namespace(a).startswith("vllm-Qwen2_5-VL-7B-")


# ------------------------------------------- vLLM's worker wrapper with the real connector

def test_worker_wrapper_saves_new_entries_through_ecstore(tmp_path):
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorMetadata
    from vllm.v1.worker.gpu.ec_connector import ActiveECConnector

    conn = EcStoreConnector(make_config("ecstore", str(tmp_path / "s"), True, True),
                            ECConnectorRole.WORKER)
    encoder_cache = {"old": torch.ones(4)}
    with patch("vllm.v1.worker.gpu.ec_connector.get_ec_transfer", return_value=conn):
        wrapper = ActiveECConnector(SimpleNamespace(), encoder_cache)
    out = SimpleNamespace(ec_connector_metadata=ECConnectorMetadata(),
                          finished_req_ids=frozenset())
    out.ec_connector_metadata = conn.build_connector_meta(SimpleNamespace())
    with wrapper.maybe_get_output(out):
        encoder_cache["new"] = torch.arange(10, dtype=torch.float16)
    conn.wait_for_saves()
    assert conn.cache.contains("test", "new") and not conn.cache.contains("test", "old")
    assert torch.equal(conn.cache.get("test", "new"), encoder_cache["new"])
    conn.shutdown()


# ------------------------- worker metadata and stats through vLLM's output aggregator

def test_pending_saves_reach_the_scheduler_through_the_aggregator(tmp_path):
    import threading

    from vllm.distributed.ec_transfer.ec_connector.utils import ECOutputAggregator
    from vllm.v1.outputs import ECConnectorOutput, ModelRunnerOutput

    store = str(tmp_path / "s")
    ranks = [EcStoreConnector(make_config("ecstore", store, True, False), ECConnectorRole.WORKER)
             for _ in range(2)]
    sched = EcStoreConnector(make_config("ecstore", store, True, False),
                             ECConnectorRole.SCHEDULER)
    gate = threading.Event()
    saver = ranks[0]._saver
    put_batch = saver._put_batch
    saver._put_batch = lambda batch: (gate.wait(10), put_batch(batch))  # hold rank 0's saves
    ranks[0].save_caches(encoder_cache={"k": torch.ones(8)}, mm_hash="k")

    def step():
        outs = [ModelRunnerOutput(req_ids=[], req_id_to_index={}, ec_connector_output=(
            ECConnectorOutput(ec_connector_worker_meta=r.build_connector_worker_meta())))
            for r in ranks]
        merged = ECOutputAggregator().aggregate(outs, output_rank=0).ec_connector_output
        if merged is not None and not merged.is_empty():
            sched.update_connector_output(merged)

    step()
    assert sched.has_pending_push_work(), "a save in flight on rank 0 was not reported"
    gate.set()
    ranks[0].wait_for_saves()
    step()
    assert not sched.has_pending_push_work()
    stats = ranks[0].get_ec_connector_stats()
    reduced = stats.reduce()
    assert (reduced["saves"], reduced["save_bytes"], reduced["save_count"]) == (1, 32, 1)
    assert 0 < reduced["save_p50_ms"] == reduced["save_p99_ms"]
    assert ranks[0].get_ec_connector_stats() is None  # taken once
    both = EcStoreConnector.build_ec_connector_stats(
        {"saves": 1, "save_seconds": [0.5]}).aggregate(stats)
    assert both.reduce()["saves"] == 2 and both.reduce()["save_count"] == 2
    assert both.reduce()["save_p99_ms"] == 500
    for c in ranks + [sched]:
        c.shutdown()


# ------------------------------------------------------------ E -> PD across hosts

def test_consumer_pulls_from_the_producers_store_named_in_the_params(tmp_path, daemon):
    producer = EcStoreConnector(make_config("ecstore", daemon["tcp"], True, False),
                                ECConnectorRole.WORKER)
    t = torch.randn(300, 64, dtype=torch.bfloat16)
    producer.save_caches(encoder_cache={"img": t}, mm_hash="img")
    producer.wait_for_saves()
    _, params = producer.request_finished(MockRequest("p", ["img"], [300]))

    local = str(tmp_path / "pd-store")  # the consumer's own store, "another host"
    # "gone" is waited for (a save may still be landing) this long, then fails the request.
    sched = EcStoreConnector(make_config("ecstore", local, False, True, {"saved_wait_ms": 300}),
                             ECConnectorRole.SCHEDULER)
    worker = EcStoreConnector(make_config("ecstore", local, False, True), ECConnectorRole.WORKER)
    req = MockRequest("c", ["img", "gone"], [300, 10])
    req.ec_transfer_params = dict(params, gone={"ec_store": params["img"]["ec_store"]})
    assert not sched.ensure_cache_available(req, 0)  # staging: the request waits
    for _ in range(200):
        if sched.ensure_cache_available(req, 0):
            break
        import time

        time.sleep(0.01)
    else:
        pytest.fail("the pull never finished")
    assert sched.has_cache_item("img") and not sched.has_cache_item("gone")
    assert sched.take_unavailable_requests() == {"c"}  # "gone" could not be pulled
    sched.update_state_after_alloc(req, 0)
    worker.bind_connector_metadata(sched.build_connector_meta(SimpleNamespace()))
    cache = {}
    worker.start_load_caches(encoder_cache=cache)
    assert torch.equal(cache["img"], t)
    for c in (producer, sched, worker):
        c.shutdown()


def test_the_token_comes_from_a_file_or_the_environment_before_the_command_line(tmp_path,
                                                                              monkeypatch):
    from ecstore import vllm_stores as conn
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("EC_STORE_TOKEN", "from-env")
    assert conn._token({"token_file": str(secret), "token": "cli"}) == "s3cret"
    assert conn._token({"token": "cli"}) == "from-env"
    monkeypatch.delenv("EC_STORE_TOKEN")
    assert conn._token({"token": "cli"}) == "cli"
    with pytest.raises(ValueError, match="cannot be read"):
        conn._token({"token_file": str(tmp_path / "missing")})


# ------------------------------------------------------------ configuration checked at start

@pytest.mark.parametrize("spec, says", [
    ("localhost", "is not a store address"),
    ("127.0.0.1:7070", "tcp://HOST:PORT"),
    ("relative/dir", "is not a store address"),
    ("dir:relative", "must be an absolute path"),
    ("tcp://host", "with a port number"),
    ("unix:serve.sock", "must be absolute"),
    ("etcd://127.0.0.1/c", "etcd://HOST:PORT"),
    ("etcd://127.0.0.1:2379", "etcd://HOST:PORT"),
    ("", "needs ec_connector_extra_config"),
])
def test_a_store_in_no_explicit_form_is_refused_naming_the_forms(tmp_path, spec, says,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be created here
    with pytest.raises(ValueError, match=says) as e:
        EcStoreConnector(make_config("ecstore", spec, True, False), ECConnectorRole.WORKER)
    assert "tcp://" in str(e.value) or says in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_unix_naming_a_store_directory_names_its_socket(tmp_path, daemon):
    served = daemon["dir"]
    with pytest.raises(ValueError, match=f"listens on unix:{served}/serve.sock"):
        EcStoreConnector(make_config("ecstore", f"unix:{served}", True, False),
                         ECConnectorRole.WORKER)
    with pytest.raises(ValueError, match="no daemon socket"):
        EcStoreConnector(make_config("ecstore", f"unix:{tmp_path}", True, False),
                         ECConnectorRole.WORKER)


@pytest.mark.parametrize("extra, says", [
    ({"timeout_ms": "fast"}, "timeout_ms='fast': write milliseconds"),
    ({"lookup_budget_ms": -5}, "lookup_budget_ms=-5: write milliseconds"),
    ({"retries": 1.5}, "retries=1.5: write a whole number"),
    ({"fail_open": "maybe"}, "fail_open='maybe': write true or false"),
    ({"transport": "udp"}, "transport='udp': transport 'udp' is not one of auto, tcp, shm, rdma"),
])
def test_a_value_of_the_wrong_kind_is_refused_naming_the_key(tmp_path, extra, says):
    config = make_config("ecstore", str(tmp_path / "s"), True, False, extra)
    with pytest.raises(ValueError, match=re.escape(says)):
        EcStoreConnector(config, ECConnectorRole.WORKER)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("key, near", [("namesapce", "namespace"), ("pool-size", "pool_size"),
                                       ("tokenfile", "token_file"), ("colour", None)])
def test_an_unknown_extra_config_key_is_refused_with_a_did_you_mean(tmp_path, key, near):
    config = make_config("ecstore", str(tmp_path / "s"), True, False, {key: "x"})
    with pytest.raises(ValueError, match="unknown key") as e:
        EcStoreConnector(config, ECConnectorRole.WORKER)
    assert (f"did you mean {near!r}" in str(e.value)) if near else "did you mean" not in str(e.value)
    assert "known keys are" in str(e.value)
    assert not (tmp_path / "s").exists()  # refused before anything was opened


def test_a_wrong_entry_under_a_scheduled_items_key_is_a_miss_and_is_erased(tmp_path):
    """An entry whose length is not the request's embed count, or whose dtype or width is
    not its namespace's: the item is a miss (computed), the entry erased and counted --
    never an exception in the worker."""
    import time

    sched = EcStoreConnector(make_config("ecstore", str(tmp_path / "s"), True, True),
                             ECConnectorRole.SCHEDULER)
    cache = sched.cache
    cache.put("test", "good", torch.randn(100, 64).to(torch.bfloat16))
    cache.put("test", "short", torch.randn(90, 64).to(torch.bfloat16))  # 100 expected
    cache.put("test", "wide", torch.randn(100, 128).to(torch.bfloat16))
    cache.put("test", "f32", torch.randn(100, 64))
    req = MockRequest("r", ["good", "short", "wide", "f32"], [100] * 4)
    assert ask_until_ready(sched, req)
    assert [sched.has_cache_item(k) for k in ("good", "short", "wide", "f32")] == \
        [True, False, False, False]
    assert sched.get_ec_connector_stats().reduce()["rejected_hits"] == 3
    sched.request_finished(req)
    deadline = time.monotonic() + 10
    while any(cache.contains("test", k) for k in ("short", "wide", "f32")):
        assert time.monotonic() < deadline, "the rejected entries were not erased"
        time.sleep(0.01)
    assert cache.contains("test", "good")
    sched.shutdown()


def test_the_connectors_counts_reach_vllms_prometheus_metrics(tmp_path):
    """Through vLLM's own ECConnectorProm, as its Prometheus stat logger builds it: the
    counts the scheduler's connector reports appear as vllm:ec_store_* counters per engine."""
    from prometheus_client import REGISTRY, generate_latest
    from vllm.distributed.ec_transfer.ec_connector.metrics import ECConnectorProm

    config = make_config("ecstore", str(tmp_path / "s"), True, True)
    config.ec_transfer_config.ec_connector = "EcStoreConnector"
    config.ec_transfer_config.ec_connector_module_path = "ecstore.vllm"
    prom = ECConnectorProm(config, ["model_name", "engine"], {0: ["m", "0"]})
    assert prom.prom_metrics is not None, "build_prom_metrics gave nothing"
    sched = EcStoreConnector(config, ECConnectorRole.SCHEDULER)
    try:
        sched.cache.put("test", "a", torch.randn(100, 64).to(torch.bfloat16))
        assert ask_until_ready(sched, MockRequest("r", ["a", "b"], [100, 10]))
        prom.observe(sched.get_ec_connector_stats().data, 0)  # as vLLM's stat logger does
        text = generate_latest(REGISTRY).decode()
        assert 'vllm:ec_store_hits_total{engine="0",model_name="m"} 1.0' in text
        assert 'vllm:ec_store_misses_total{engine="0",model_name="m"} 1.0' in text
        assert 'vllm:ec_store_misses_absent_total{engine="0",model_name="m"} 1.0' in text
        assert 'vllm:ec_store_lookup_seconds_count{engine="0",model_name="m"} 1.0' in text
        assert 'vllm:ec_store_lookup_seconds_bucket{engine="0",le="+Inf",model_name="m"} 1.0' \
            in text
    finally:
        sched.shutdown()
