"""EcStoreConnector: vLLM's encoder-cache (EC) connector backed by ec-store.

A drop-in for ECExampleConnector (one safetensors file per entry, never evicted):

    vllm serve Qwen/Qwen2.5-VL-7B-Instruct --ec-transfer-config '{
        "ec_connector": "EcStoreConnector", "ec_connector_module_path": "ecstore.vllm",
        "ec_role": "ec_both",
        "ec_connector_extra_config": {"store": "unix:/var/cache/ec-store/serve.sock"}}'

ec_connector_extra_config: ecstore/config.py lists every key with its default ("store" is
the only one needed); an unknown key or a value of the wrong kind fails the engine's start
saying what to write. The store is a daemon -- "unix:/dir/serve.sock" (the usual
deployment: one daemon per host shared by every engine process) or "tcp://host:port" -- or
"dir:/absolute/path", a store embedded in the engine process.

No scheduler hook waits on the store (ecstore/vllm_scheduler.py): a request's items are
pinned on the connector's lookup thread (Cache.pin: no bytes move; a daemon keeps a pin
until released or its lease TTL, 30 s); the request waits a step until the answer is back,
and past lookup_budget_ms its items are misses. `has_cache_item` answers from the pinned
set -- a dict lookup, no I/O -- so an item said to be a hit cannot be evicted before the
worker loads it. Pins are dropped in `update_state_after_free` and `request_finished`,
released on a thread of their own.

Saves: only on tensor-parallel rank 0 (every rank holds the same output). A CUDA tensor is
copied into pinned host memory with a non-blocking copy and an event; a background thread
waits for the event and hands the bytes to the store, so `save_caches` returns at once.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from vllm.distributed.ec_transfer.ec_connector.base import (
    ECConnectorBase,
    ECConnectorMetadata,
    ECConnectorRole,
    ECConnectorWorkerMetadata,
)
from vllm.distributed.ec_transfer.ec_connector.metrics import ECConnectorStats
from vllm.logger import init_logger

import ecstore
from ecstore import transfer, vllm_stores
from ecstore.config import check_keys, setting
from ecstore.transfer import AsyncSaver
from ecstore.vllm_metrics import EcStoreConnectorStats, Recorder
from ecstore.vllm_scheduler import SchedulerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = init_logger(__name__)


class _ThroughVllm(logging.Handler):
    """Hands the connector's records (ecstore.lookups, ecstore.vllm_stores, ...) to vLLM's
    logger: they go where vLLM's own go, with its format, rather than to Python's last-resort
    handler (bare lines, warnings only). Looked up per record, so a later reconfiguration
    of vLLM's logging is followed."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger("vllm").handle(record)


def _log_through_vllm() -> None:
    """Left alone where the application gave "ecstore" handlers of its own."""
    ours = logging.getLogger("ecstore")
    if ours.handlers:
        return
    ours.addHandler(_ThroughVllm())
    ours.setLevel(logging.getLogger("vllm").getEffectiveLevel())
    ours.propagate = False  # once, through vLLM's logger


def default_namespace(vllm_config: "VllmConfig") -> str:
    """"vllm-<model>-<hash of model, revision, dtype and encoder settings>"."""
    mc = getattr(vllm_config, "model_config", None)
    model = str(getattr(mc, "model", "model"))
    parts = [model, str(getattr(mc, "revision", None)), str(getattr(mc, "dtype", None))]
    mm = getattr(mc, "multimodal_config", None)
    if mm is not None:
        parts.append(repr(sorted((k, repr(v)) for k, v in vars(mm).items())))
    digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", model.rsplit("/", 1)[-1])[:80]
    return f"vllm-{name}-{digest}"


@dataclass
class EcStoreConnectorMetadata(ECConnectorMetadata):
    """Scheduler -> worker, per step: the identifiers to load and their embed counts, their
    store keys where a tenant's salt scopes them, and the salted keys to save computed
    items as."""

    loads: dict[str, int] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    saves: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class EcStoreWorkerMetadata(ECConnectorWorkerMetadata):
    """Worker -> scheduler, per step (summed over ranks): saves still being handed to the
    store, and the keys whose saves completed since the last step."""

    pending_saves: int = 0
    saved: list[str] = field(default_factory=list)

    def aggregate(self, other: ECConnectorWorkerMetadata) -> "EcStoreWorkerMetadata":
        assert isinstance(other, EcStoreWorkerMetadata)
        return EcStoreWorkerMetadata(self.pending_saves + other.pending_saves,
                                     self.saved + other.saved)


class EcStoreConnector(ECConnectorBase):
    def __init__(self, vllm_config: "VllmConfig", role: ECConnectorRole):
        super().__init__(vllm_config=vllm_config, role=role)
        cfg = vllm_config.ec_transfer_config
        extra = dict(getattr(cfg, "ec_connector_extra_config", None) or {})
        check_keys(extra)
        _log_through_vllm()  # vLLM has configured its logging by now
        self._fail_open = setting(extra, "fail_open")
        self._ns = extra.get("namespace") or default_namespace(vllm_config)
        self._spec, self._cache = vllm_stores.acquire(extra)
        self._stats = Recorder()
        # Scheduler side: ecstore/vllm_scheduler.py.
        self._sched = SchedulerSide(self._cache, self._ns, self._spec, extra, self._stats,
                                    self.is_producer)
        self._remote_pending = 0  # saves in flight on the workers, as last reported
        # Worker side.
        self._reported_pending = 0  # what this worker last told the scheduler
        self._saver = AsyncSaver(self._cache, self._ns,
                                 None if not self._fail_open else self._save_failed,
                                 on_saved=self._note_saved)
        self._saved_lock = threading.Lock()
        self._saved_keys: list[str] = []

    @property
    def namespace(self) -> str:
        return self._ns

    @property
    def cache(self) -> ecstore.Cache:
        return self._cache

    # ------------------------------------------------------------------ scheduler side

    def ensure_cache_available(self, request: "Request", num_computed_tokens: int) -> bool:
        # Never a store call here (ecstore/vllm_scheduler.py says why).
        if not self.is_consumer:
            return True
        return self._sched.ensure(request)

    def take_unavailable_requests(self) -> set[str]:
        return self._sched.take_unavailable()

    def has_cache_item(self, identifier: str) -> bool:
        return self.is_consumer and self._sched.has(identifier)

    def update_state_after_alloc(self, request: "Request", index: int) -> None:
        self._sched.after_alloc(request, index)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> ECConnectorMetadata:
        loads, keys, saves = self._sched.take_meta()
        return EcStoreConnectorMetadata(loads=loads, keys=keys, saves=saves)

    def update_state_after_free(self, request: "Request", index: int) -> None:
        self._sched.after_free(request, index)

    def request_finished(self, request: "Request") -> tuple[bool, dict[str, Any] | None]:
        self._sched.finished(request)
        if not self.is_producer or not request.mm_features:
            return False, None
        # vLLM's own per-item metadata (what its proxy forwards as ec_transfer_params), with
        # where the entry lives beside it: a consumer on this store waits for a save still
        # landing, one on another host pulls from it.
        try:
            from vllm.distributed.ec_transfer.ec_connector.utils import (
                PlaceholderMetadataResolver, collect_ec_item_metadata)

            items = collect_ec_item_metadata(
                request.mm_features, PlaceholderMetadataResolver(self._vllm_config.model_config))
        except Exception:  # no model config (tests) or no media data: keys and modality only
            items = {f.identifier: {"modality": f.modality} for f in request.mm_features}
        for ident, item in items.items():
            item["ec_store"] = {"store": self._spec, "namespace": self._ns}
            key = self._sched.key(request, ident)
            if key != ident:
                item["ec_store"]["key"] = key
        return False, items

    def receive_addresses(self, *args: Any, **kwargs: Any) -> list:
        """Where a push-based connector's peers send to: none here (consumers read the
        store), for a base class that asks."""
        return []

    def has_pending_push_work(self) -> bool:
        # The scheduler's connector learns of the workers' saves through their metadata.
        return self._saver.pending() > 0 or self._remote_pending > 0

    def update_connector_output(self, connector_output: Any) -> None:
        meta = getattr(connector_output, "ec_connector_worker_meta", None)
        if isinstance(meta, EcStoreWorkerMetadata):
            self._remote_pending = meta.pending_saves

    def build_connector_worker_meta(self) -> ECConnectorWorkerMetadata | None:
        with self._saved_lock:
            saved, self._saved_keys = self._saved_keys, []
        pending = self._saver.pending()
        if not saved and not pending and not self._reported_pending:
            return None  # nothing new; the scheduler already knows nothing is pending
        self._reported_pending = pending
        return EcStoreWorkerMetadata(pending, saved)

    def get_ec_connector_stats(self) -> ECConnectorStats | None:
        self._count_cluster()
        return self._stats.take()

    def _count_cluster(self) -> None:
        """A cluster client's counts since the last report (the scheduler's connector only:
        the worker's in the same process shares the client)."""
        if self._role != ECConnectorRole.SCHEDULER:
            return
        now = self._cache.cluster()
        if now is None:
            return
        last = getattr(self, "_cluster_seen", {})
        for key in ("routed", "fallback_hits", "unavailable", "membership_changes"):
            if now[key] > last.get(key, 0):
                self._stats.count(f"cluster_{key}", now[key] - last.get(key, 0))
        self._cluster_seen = now

    @classmethod
    def build_ec_connector_stats(cls, data: dict[str, Any] | None = None) -> ECConnectorStats:
        return EcStoreConnectorStats(dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: dict,
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]) -> Any:
        from ecstore.vllm_metrics import EcStorePromMetrics

        return EcStorePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # --------------------------------------------------------------------- worker side

    def start_load_caches(self, encoder_cache: dict[str, torch.Tensor], **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, EcStoreConnectorMetadata)
        idents = [k for k in dict.fromkeys(meta.loads) if k not in encoder_cache]
        if not idents:
            return
        # Each item's embed count is its encoder output's rows: the loads' buffers are sized
        # from it (and checked against the store's answer) without a lookup first.
        keys = [meta.keys.get(k, k) for k in idents]
        rows = [meta.loads[k] for k in idents]
        started = time.monotonic()
        loaded = transfer.load_many(self._cache, self._ns, keys, _load_device(), rows)
        self._stats.observe("load_seconds", time.monotonic() - started)
        for ident, t in zip(idents, loaded):
            encoder_cache[ident] = t
            self._stats.count("loads")
            self._stats.count("load_bytes", t.numel() * t.element_size())

    def save_caches(self, encoder_cache: dict[str, torch.Tensor], mm_hash: str,
                    **kwargs: Any) -> None:
        if not self.is_producer or _tp_rank() != 0:
            return
        meta = self._connector_metadata
        if isinstance(meta, EcStoreConnectorMetadata) and mm_hash in meta.loads:
            # The step loads it from the store: saving it back would write the same entry.
            self._stats.count("saves_merged")
            return
        saves = meta.saves if isinstance(meta, EcStoreConnectorMetadata) else {}
        for key in saves.get(mm_hash) or [mm_hash]:  # a tenant's salted key, else the hash
            self._saver.save(key, encoder_cache[mm_hash])

    def _note_saved(self, key: str, nbytes: int, seconds: float) -> None:
        with self._saved_lock:
            self._saved_keys.append(key)
        self._stats.count("saves")
        self._stats.count("save_bytes", nbytes)
        self._stats.observe("save_seconds", seconds)

    def _save_failed(self, key: str, e: Exception) -> None:
        # Never raised into the engine: the item stays computable, only its reuse is lost.
        self._stats.count("save_errors")
        logger.warning("ec-store: saving %s failed: %s", key, e)

    def wait_for_saves(self, timeout: float | None = None) -> None:
        """Blocks until every save handed over so far is in the store."""
        self._saver.wait(timeout)

    def shutdown(self) -> None:
        self._sched.close()
        self._saver.close()
        if self._cache is not None:
            vllm_stores.release(self._spec)
            self._cache = None


def _load_device() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return f"{current_platform.device_type}:{current_platform.current_device()}"
    return "cpu"


def _tp_rank() -> int:
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        return get_tensor_model_parallel_rank()
    except Exception:  # no model-parallel group (one process, tests): rank 0
        return 0
