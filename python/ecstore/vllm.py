"""EcStoreConnector: vLLM's encoder-cache (EC) connector backed by ec-store.

A drop-in for ECExampleConnector (one safetensors file per entry, never evicted):

    vllm serve Qwen/Qwen2.5-VL-7B-Instruct --ec-transfer-config '{
        "ec_connector": "EcStoreConnector", "ec_connector_module_path": "ecstore.vllm",
        "ec_role": "ec_both",
        "ec_connector_extra_config": {"store": "unix:/var/cache/ec/serve.sock"}}'

ec_connector_extra_config:
  store       the address of an `ec-store serve` daemon -- "unix:/dir/serve.sock" (the usual
              deployment: one daemon per host shared by every engine process) or
              "tcp://host:port" -- or "dir:/absolute/path", a store embedded in the engine
              process. Anything else, and any unknown key, fails the engine's start saying
              what to write (ecstore/config.py).
  namespace   default: derived from the model, revision, dtype and encoder settings, so two
              models never read each other's entries.
  pool_size, disk_quota   for an embedded store ("8GiB").
  token_file  a file holding the daemon's shared secret; else EC_STORE_TOKEN; else
  token       the secret itself (visible in the engine's command line: prefer the others).
  fail_open   default true: a store that cannot be reached is a miss (the encoder runs)
              and a save that fails is logged, never an engine failure.

How a hit stays a hit: the scheduler asks `ensure_cache_available` for a waiting request,
and the connector pins every item the store holds (Cache.pin: no bytes move; a daemon keeps
a pin until released or its lease TTL, 30 s) on its lookup thread (ecstore/lookups.py): the
request waits a step until the answer is back, and past lookup_budget_ms its items are
misses. `has_cache_item` then answers from the pinned set -- a dict lookup, no I/O -- so an
item said to be a hit cannot be evicted before the worker loads it. Pins are dropped in
`update_state_after_free` and `request_finished`, released on a thread of their own. No
scheduler hook waits on the store.

Saves: only on tensor-parallel rank 0 (every rank holds the same output). A CUDA tensor is
copied into pinned host memory with a non-blocking copy and an event; a background thread
waits for the event and hands the bytes to the store, so `save_caches` returns at once.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import threading
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
from ecstore import transfer
from ecstore.config import check_keys, parse_store
from ecstore.lookups import Lookups
from ecstore.transfer import AsyncSaver

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = init_logger(__name__)

_shared: dict[str, tuple[ecstore.Cache, int]] = {}
_shared_lock = threading.Lock()


def _acquire_cache(extra: dict) -> tuple[str, ecstore.Cache]:
    """One Cache per store per process: the scheduler's and the worker's connectors of a
    single-process engine share an embedded store (a directory opens once per process)."""
    where = parse_store(extra.get("store"))
    spec = str(extra.get("store")).strip()
    with _shared_lock:
        if spec in _shared:
            cache, users = _shared[spec]
            _shared[spec] = (cache, users + 1)
            return spec, cache
        if where.remote:
            cache = ecstore.connect(where.target, token=_token(extra),
                                    timeout=float(extra.get("timeout_ms", 2000)) / 1000,
                                    retries=int(extra.get("retries", 1)))
        else:
            cache = ecstore.open(where.target, extra.get("pool_size", "1GiB"),
                                 extra.get("disk_quota", "64GiB"))
        # Host<->device copies from and into the pool at pinned speed: register it once.
        if torch.cuda.is_available():
            try:
                cache.register_with_cuda()
            except ecstore.Error as e:
                logger.warning("ec-store: %s", e)
        _shared[spec] = (cache, 1)
        return spec, cache


def _token(extra: dict) -> str | None:
    """The daemon's secret: from token_file (a file only the engine's user reads), else
    EC_STORE_TOKEN, else token (visible in the engine's command line: discouraged)."""
    if extra.get("token_file"):
        path = str(extra["token_file"])
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as e:
            raise ValueError(f"ec_connector_extra_config token_file {path!r} cannot be read "
                             f"({e.strerror}); give a readable file holding the daemon's "
                             "secret") from e
    return os.environ.get("EC_STORE_TOKEN") or extra.get("token")


def _release_cache(spec: str) -> None:
    with _shared_lock:
        cache, users = _shared[spec]
        if users > 1:
            _shared[spec] = (cache, users - 1)
            return
        del _shared[spec]
    cache.close()


def _remote_source(request: Any, key: str, local_spec: str) -> dict | None:
    """The producer's store for `key` from the request's ec_transfer_params (what a
    producer's request_finished returned, forwarded by the proxy), when it is not ours."""
    params = getattr(request, "ec_transfer_params", None)
    if not isinstance(params, dict):
        return None
    item = params.get(key)
    source = item.get("ec_store") if isinstance(item, dict) else None
    if not isinstance(source, dict) or not source.get("store") or source["store"] == local_spec:
        return None
    return source


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
    """Scheduler -> worker, per step: the identifiers to load and their embed counts."""

    loads: dict[str, int] = field(default_factory=dict)


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


@dataclass
class EcStoreConnectorStats(ECConnectorStats):
    """Counts and bytes of saves and loads, and scheduler hits and misses; summed."""

    def reset(self) -> None:
        self.data = {}

    def add(self, name: str, value: float = 1) -> None:
        self.data[name] = self.data.get(name, 0) + value

    def aggregate(self, other: ECConnectorStats) -> "EcStoreConnectorStats":
        out = EcStoreConnectorStats(dict(self.data))
        for k, v in other.data.items():
            out.add(k, v)
        return out

    def reduce(self) -> dict[str, int | float]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not self.data


class EcStoreConnector(ECConnectorBase):
    def __init__(self, vllm_config: "VllmConfig", role: ECConnectorRole):
        super().__init__(vllm_config=vllm_config, role=role)
        cfg = vllm_config.ec_transfer_config
        extra = dict(getattr(cfg, "ec_connector_extra_config", None) or {})
        check_keys(extra)
        self._fail_open = bool(extra.get("fail_open", True))
        self._ns = extra.get("namespace") or default_namespace(vllm_config)
        self._spec, self._cache = _acquire_cache(extra)
        # Scheduler side.
        self._pins: dict[str, list[Any]] = {}  # identifier -> [lease, pin count]
        self._decided: dict[str, dict[str, bool]] = {}  # request id -> identifier -> pinned
        self._to_load: dict[str, int] = {}
        self._lookups = Lookups(self._cache, self._ns,
                                float(extra.get("lookup_budget_ms", 50)) / 1000)
        self._puller = concurrent.futures.ThreadPoolExecutor(1, "ecstore-pull")
        self._pulls: dict[str, concurrent.futures.Future] = {}
        self._pulled_done: set[str] = set()
        self._layout: tuple[str, tuple[int, ...]] | None = None  # the namespace's entries'
        self._rejected: set[str] = set()  # keys whose rejection was logged
        self._remotes: dict[str, ecstore.Cache] = {}
        self._unavailable: set[str] = set()
        self._remote_pending = 0  # saves in flight on the workers, as last reported
        self._reported_pending = 0  # what this worker last told the scheduler
        # Worker side.
        self._saver = AsyncSaver(self._cache, self._ns,
                                 None if not self._fail_open else self._save_failed,
                                 on_saved=self._note_saved)
        self._saved_lock = threading.Lock()
        self._saved_keys: list[str] = []
        self._stats = EcStoreConnectorStats()

    @property
    def namespace(self) -> str:
        return self._ns

    @property
    def cache(self) -> ecstore.Cache:
        return self._cache

    # ------------------------------------------------------------------ scheduler side

    def ensure_cache_available(self, request: "Request", num_computed_tokens: int) -> bool:
        # Never a store call here (ecstore/lookups.py says why): the items are pinned on the
        # lookup thread; until that answers the request waits a step, and past the lookup
        # budget its items are misses.
        if not self.is_consumer:
            return True
        decided = self._decided.setdefault(request.request_id, {})
        ready = True
        fresh = []
        for feature in request.mm_features:
            key = feature.identifier
            if key in decided or key in fresh:
                continue
            source = _remote_source(request, key, self._spec)
            if source is not None and not self._pulled(request.request_id, key, source):
                ready = False  # staging from the producer's store: ask again next step
                continue
            fresh.append(key)
        if not fresh:
            return ready
        timeouts = self._lookups.timeouts
        got = self._lookups.ask(request.request_id, fresh)
        if got is None:
            return False  # not back yet: vLLM asks again next step
        if self._lookups.timeouts > timeouts:
            self._count("lookup_timeouts")
        errors, self._lookups.errors = self._lookups.errors, 0
        if errors:
            self._count("lookup_errors", errors)
        if errors and not self._fail_open:
            raise ecstore.Unavailable(f"ec-store: {errors} item(s) of {request.request_id} "
                                      "could not be looked up (fail_open is false)")
        rows = {f.identifier: request.get_num_encoder_embeds(i)
                for i, f in enumerate(request.mm_features)}
        for key in fresh:
            self._pulled_done.discard(key)
            lease = got.get(key)
            if lease is not None and not self._fits(key, lease.info, rows.get(key)):
                self._lookups.release(lease)  # a rejected hit: the encoder computes it
                self._lookups.erase(key)
                lease = None
            decided[key] = self._take_pin(key, lease)
            self._count("hits" if decided[key] else "misses")
        return ready

    def _fits(self, key: str, info: Any, rows: int | None) -> bool:
        """Whether a stored entry is what the model runner expects for the item: `rows`
        embeddings, and the dtype and width of the namespace's other entries (a namespace is
        one model's encoder: one layout). A wrong one -- a cached item of the wrong length
        once crashed a whole deployment (vLLM #55547) -- is erased and counted, its key
        logged once, and the item is a miss."""
        shape = list(info.shape)
        layout = (info.dtype, tuple(shape[1:]))
        why = ("no shape" if not shape else
               f"{shape[0]} embeddings where the request has {rows}"
               if rows is not None and shape[0] != rows else
               f"layout {layout} where the namespace's entries have {self._layout}"
               if self._layout is not None and layout != self._layout else "")
        if not why:
            self._layout = self._layout or layout
            return True
        self._count("rejected_hits")
        if key not in self._rejected:
            self._rejected.add(key)
            logger.warning("ec-store: entry %s/%s rejected (%s); erased, the item is computed",
                           self._ns, key, why)
        return False

    def _pulled(self, req_id: str, key: str, source: dict) -> bool:
        """E->PD across hosts: copies `key` from the producer's store (named in the
        request's ec_transfer_params) into this one, in the background. True once there is
        nothing to wait for (present here, pulled, or failed: a failed pull fails this
        request through take_unavailable_requests -- retryable, the encode re-runs)."""
        if key in self._pulled_done:
            return True
        fut = self._pulls.get(key)
        if fut is None:
            self._pulls[key] = self._puller.submit(self._pull, key, source)
            return False
        if not fut.done():
            return False
        del self._pulls[key]
        self._pulled_done.add(key)  # until its pin is decided
        try:
            fut.result()
        except Exception as e:  # noqa: BLE001 - every failure fails the one request
            logger.warning("ec-store: pulling %s from %s failed: %s", key, source, e)
            self._unavailable.add(req_id)
        return True

    def _pull(self, key: str, source: dict) -> None:
        if self._cache.contains(self._ns, key):
            return
        spec = str(source["store"])
        remote = self._remotes.get(spec)
        if remote is None:
            where = parse_store(spec)
            remote = self._remotes[spec] = (
                ecstore.connect(where.target) if where.remote
                else _acquire_cache({"store": spec})[1])
        with remote.acquire(str(source.get("namespace", self._ns)), key) as lease:
            self._cache.put(self._ns, key, lease.tensor())
        self._count("pulls")

    def take_unavailable_requests(self) -> set[str]:
        failed, self._unavailable = self._unavailable, set()
        return failed

    def _take_pin(self, key: str, lease: Any) -> bool:
        """Counts a request's use of `key`'s pin, taking `lease` (the lookup thread's pin) as
        it where the key has none yet; whether the key is a hit."""
        held = self._pins.get(key)
        if held is not None:
            held[1] += 1
            if lease is not None:
                self._lookups.release(lease)
            return True
        if lease is None:
            return False
        self._pins[key] = [lease, 1]
        return True

    def _unpin(self, key: str) -> None:
        held = self._pins.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del self._pins[key]
            self._lookups.release(held[0])

    def has_cache_item(self, identifier: str) -> bool:
        # Pinned items only: what this says is a hit stays loadable until it is freed.
        return self.is_consumer and identifier in self._pins

    def update_state_after_alloc(self, request: "Request", index: int) -> None:
        key = request.mm_features[index].identifier
        if self.is_consumer and key in self._pins:
            self._to_load[key] = request.get_num_encoder_embeds(index)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> ECConnectorMetadata:
        meta = EcStoreConnectorMetadata(loads=dict(self._to_load))
        self._to_load.clear()
        return meta

    def update_state_after_free(self, request: "Request", index: int) -> None:
        key = request.mm_features[index].identifier
        decided = self._decided.get(request.request_id, {})
        if decided.pop(key, False):
            self._unpin(key)

    def request_finished(self, request: "Request") -> tuple[bool, dict[str, Any] | None]:
        self._lookups.forget(request.request_id)
        for key, pinned in self._decided.pop(request.request_id, {}).items():
            if pinned:
                self._unpin(key)
        if not self.is_producer or not request.mm_features:
            return False, None
        # vLLM's own per-item metadata (what its proxy forwards as ec_transfer_params), with
        # where the entry lives beside it, for a consumer on another host to pull from.
        try:
            from vllm.distributed.ec_transfer.ec_connector.utils import (
                PlaceholderMetadataResolver, collect_ec_item_metadata)

            items = collect_ec_item_metadata(
                request.mm_features, PlaceholderMetadataResolver(self._vllm_config.model_config))
        except Exception:  # no model config (tests) or no media data: keys and modality only
            items = {f.identifier: {"modality": f.modality} for f in request.mm_features}
        for item in items.values():
            item["ec_store"] = {"store": self._spec, "namespace": self._ns}
        return False, items

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
        with self._saved_lock:
            if self._stats.is_empty():
                return None
            stats, self._stats = self._stats, EcStoreConnectorStats()
        return stats

    def _count(self, name: str, value: float = 1) -> None:
        # Counted from the scheduler, save, pull and worker threads alike.
        with self._saved_lock:
            self._stats.add(name, value)

    @classmethod
    def build_ec_connector_stats(cls, data: dict[str, Any] | None = None) -> ECConnectorStats:
        return EcStoreConnectorStats(dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: dict,
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]) -> Any:
        from ecstore.vllm_metrics import EcStorePromMetrics

        return EcStorePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def _note_saved(self, key: str, nbytes: int) -> None:
        with self._saved_lock:
            self._saved_keys.append(key)
        self._count("saves")
        self._count("save_bytes", nbytes)

    # --------------------------------------------------------------------- worker side

    def start_load_caches(self, encoder_cache: dict[str, torch.Tensor], **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, EcStoreConnectorMetadata)
        device = _load_device()
        keys = [k for k in dict.fromkeys(meta.loads) if k not in encoder_cache]
        # Each item's embed count is its encoder output's rows: the loads' buffers are sized
        # from it (and checked against the store's answer) without a lookup first.
        rows = [meta.loads[k] for k in keys]
        for key, t in zip(keys, transfer.load_many(self._cache, self._ns, keys, device, rows)):
            encoder_cache[key] = t
            self._count("loads")
            self._count("load_bytes", t.numel() * t.element_size())

    def save_caches(self, encoder_cache: dict[str, torch.Tensor], mm_hash: str,
                    **kwargs: Any) -> None:
        if not self.is_producer or _tp_rank() != 0:
            return
        self._saver.save(mm_hash, encoder_cache[mm_hash])

    def _save_failed(self, key: str, e: Exception) -> None:
        logger.warning("ec-store: saving %s failed: %s", key, e)

    def wait_for_saves(self, timeout: float | None = None) -> None:
        """Blocks until every save handed over so far is in the store."""
        self._saver.wait(timeout)

    def shutdown(self) -> None:
        self._lookups.close()
        self._puller.shutdown(wait=True)
        for spec, remote in self._remotes.items():
            if parse_store(spec).remote:
                remote.close()
            else:
                _release_cache(spec)
        self._remotes.clear()
        self._saver.close()
        for held in self._pins.values():
            held[0].release()
        self._pins.clear()
        if self._cache is not None:
            _release_cache(self._spec)
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
