"""The connector's counts and latencies, and their place on vLLM's own /metrics.

What the connector reports through get_ec_connector_stats: hits, misses (all, and by cause:
absent, timed out, store unavailable; rejected hits apart), saves, loads, pulls and their
bytes as sums, and lookup, load and save latencies as lists of observations (seconds).
vLLM sums the workers' and the scheduler's reports and hands their `data` to the connector's
Prometheus metrics: counters named as vLLM names its own (`vllm:ec_store_hits_total`, ...)
and histograms (`vllm:ec_store_lookup_seconds`, ...), per engine.

Thread rules: a Recorder is shared by the threads that count (scheduler, save, pull,
worker); stats objects and the Prometheus metrics belong to the thread that holds them.
"""

from __future__ import annotations

import threading
from typing import Any

from vllm.distributed.ec_transfer.ec_connector.metrics import (ECConnectorPromMetrics,
                                                                ECConnectorStats)

# stats key -> what the counter counts
COUNTERS = {
    "hits": "items the store held, pinned for the request",
    "misses": "items the encoder computes: absent, rejected, or the store too slow or down",
    "misses_absent": "misses because the store did not hold the item",
    "misses_timeout": "misses because the lookup did not come back within lookup_budget_ms",
    "misses_unavailable": "misses because the store could not be reached",
    "rejected_hits": "entries of the wrong length, dtype or width, erased (a miss each)",
    "lookup_timeouts": "requests whose lookup did not come back within lookup_budget_ms",
    "lookup_errors": "items whose lookup failed (the store unreachable)",
    "saved_waits": "items a producer reported saved that were waited for until they landed",
    "claim_waits": "items another engine had claimed that were waited for until its save landed",
    "saves": "encoder outputs saved",
    "save_bytes": "bytes saved",
    "save_errors": "encoder outputs whose save failed (logged; the engine goes on)",
    "saves_merged": "saves skipped because the same step loads the item from the store",
    "shared_pins": "items of a request already pinned for another, decided without a lookup",
    "loads": "entries loaded by the worker",
    "load_bytes": "bytes loaded by the worker",
    "pulls": "entries pulled from a producer's store",
    "cluster_routed": "calls (per item) a cluster client sent to items' owner nodes",
    "cluster_fallback_hits": "items missing at their owner found at their next node (a join)",
    "cluster_unavailable": "calls (per item) a cluster node did not answer: misses",
    "cluster_membership_changes": "nodes that joined or left, as the cluster client saw",
}

# stats key -> what the histogram observes, in seconds
HISTOGRAMS = {
    "lookup_seconds": "a request's store lookup, asked to answered (off the scheduler thread)",
    "load_seconds": "a worker step's loads from the store, per item",
    "save_seconds": "an encoder output's save, handed over to stored",
}
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class EcStoreConnectorStats(ECConnectorStats):
    """Counts as sums, latencies as lists of seconds; aggregated by adding and joining."""

    def reset(self) -> None:
        self.data = {}

    def add(self, name: str, value: float = 1) -> None:
        self.data[name] = self.data.get(name, 0) + value

    def observe(self, name: str, seconds: float) -> None:
        self.data.setdefault(name, []).append(seconds)

    def aggregate(self, other: ECConnectorStats) -> "EcStoreConnectorStats":
        out = EcStoreConnectorStats({k: list(v) if isinstance(v, list) else v
                                     for k, v in self.data.items()})
        for k, v in other.data.items():
            if isinstance(v, list):
                out.data.setdefault(k, []).extend(v)
            else:
                out.add(k, v)
        return out

    def reduce(self) -> dict[str, int | float]:
        """Sums as they are; each latency as its count, p50 and p99 in ms (vLLM's log line)."""
        out: dict[str, int | float] = {}
        for k, v in self.data.items():
            if not isinstance(v, list):
                out[k] = v
                continue
            name = k.removesuffix("_seconds")
            ordered = sorted(v)
            out[f"{name}_count"] = len(ordered)
            if ordered:
                out[f"{name}_p50_ms"] = round(ordered[len(ordered) // 2] * 1e3, 3)
                out[f"{name}_p99_ms"] = round(ordered[min(len(ordered) - 1,
                                                          len(ordered) * 99 // 100)] * 1e3, 3)
        return out

    def is_empty(self) -> bool:
        return not self.data


class Recorder:
    """The connector's stats, counted from any of its threads, taken once per report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = EcStoreConnectorStats()

    def count(self, name: str, value: float = 1) -> None:
        with self._lock:
            self._stats.add(name, value)

    def observe(self, name: str, seconds: float) -> None:
        with self._lock:
            self._stats.observe(name, seconds)

    def take(self) -> EcStoreConnectorStats | None:
        with self._lock:
            if self._stats.is_empty():
                return None
            stats, self._stats = self._stats, EcStoreConnectorStats()
        return stats


class EcStorePromMetrics(ECConnectorPromMetrics):
    def __init__(self, vllm_config: Any, metric_types: dict, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {}
        for key, doc in COUNTERS.items():
            counter = self._counter_cls(name=f"vllm:ec_store_{key}",
                                        documentation=f"ec-store connector: {doc}",
                                        labelnames=labelnames)
            self._counters[key] = {idx: counter.labels(*values)
                                   for idx, values in per_engine_labelvalues.items()}
        self._histograms = {}
        for key, doc in HISTOGRAMS.items():
            histogram = self._histogram_cls(name=f"vllm:ec_store_{key}",
                                            documentation=f"ec-store connector: {doc}",
                                            buckets=_BUCKETS, labelnames=labelnames)
            self._histograms[key] = {idx: histogram.labels(*values)
                                     for idx, values in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for key, value in transfer_stats_data.items():
            per_engine = self._histograms.get(key)
            if per_engine is not None and engine_idx in per_engine:
                for seconds in value:
                    per_engine[engine_idx].observe(seconds)
                continue
            per_engine = self._counters.get(key)
            if per_engine is not None and engine_idx in per_engine and value > 0:
                per_engine[engine_idx].inc(value)
