"""The connector's counts on vLLM's own /metrics, beside vLLM's series: what the connector
reports through get_ec_connector_stats (hits, misses, rejected hits, lookups answered by the
budget or failed, saves, loads, pulls and their bytes), summed per engine as counters named
as vLLM names its own (`vllm:ec_store_hits_total`, ...)."""

from __future__ import annotations

from typing import Any

from vllm.distributed.ec_transfer.ec_connector.metrics import ECConnectorPromMetrics

# stats key -> what the counter counts
COUNTERS = {
    "hits": "items the store held, pinned for the request",
    "misses": "items the encoder computes: absent, rejected, or the store too slow or down",
    "rejected_hits": "entries of the wrong length, dtype or width, erased (a miss each)",
    "lookup_timeouts": "requests whose lookup did not come back within lookup_budget_ms",
    "lookup_errors": "items whose lookup failed (the store unreachable)",
    "saves": "encoder outputs saved",
    "save_bytes": "bytes saved",
    "loads": "entries loaded by the worker",
    "load_bytes": "bytes loaded by the worker",
    "pulls": "entries pulled from a producer's store",
}


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

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for key, value in transfer_stats_data.items():
            per_engine = self._counters.get(key)
            if per_engine is not None and engine_idx in per_engine and value > 0:
                per_engine[engine_idx].inc(value)
