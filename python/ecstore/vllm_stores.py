"""The stores the vLLM connector opens, one Cache per store per process: the scheduler's and
the worker's connectors of a single-process engine share an embedded store (a directory
opens once per process), and a consumer's pulls from a producer's store reuse it.

Thread rules: acquire and release from any thread (one lock guards the table).
"""

from __future__ import annotations

import logging
import os
import threading

import ecstore
from ecstore.config import etcd_options, parse_store, setting, tls_options
from ecstore.deferred import Deferred

logger = logging.getLogger(__name__)

_shared: dict[str, tuple[ecstore.Cache, int]] = {}
_shared_lock = threading.Lock()


def acquire(extra: dict) -> tuple[str, ecstore.Cache]:
    """The store that extra["store"] names, opened or connected once; (its spec, Cache)."""
    where = parse_store(extra.get("store"))
    spec = str(extra.get("store")).strip()
    with _shared_lock:
        if spec in _shared:
            cache, users = _shared[spec]
            _shared[spec] = (cache, users + 1)
            return spec, cache
        if where.remote:
            token = _token(extra)

            def connect() -> ecstore.Cache:
                cache = ecstore.connect(where.target, token=token, tls=tls_options(extra, where),
                                        etcd=etcd_options(extra, where),
                                        transport=setting(extra, "transport"),
                                        timeout=setting(extra, "timeout_ms"),
                                        connect_timeout=setting(extra, "connect_timeout_ms"),
                                        retries=setting(extra, "retries"))
                _register_with_cuda(cache)
                return cache

            try:
                cache = connect()
            except ecstore.Unavailable as e:
                if not setting(extra, "fail_open"):
                    raise
                logger.warning("ec-store: %s; items are misses until it answers", e)
                cache = Deferred(connect)
        else:
            cache = ecstore.open(where.target, extra.get("pool_size", "256MiB"),
                                 extra.get("disk_quota", "16GiB"))
            _register_with_cuda(cache)
        _shared[spec] = (cache, 1)
        return spec, cache


def release(spec: str) -> None:
    with _shared_lock:
        cache, users = _shared[spec]
        if users > 1:
            _shared[spec] = (cache, users - 1)
            return
        del _shared[spec]
    cache.close()


def _register_with_cuda(cache: ecstore.Cache) -> None:
    """Host<->device copies from and into the pool at pinned speed: registered once."""
    import torch

    if torch.cuda.is_available():
        try:
            cache.register_with_cuda()
        except ecstore.Error as e:
            logger.warning("ec-store: %s", e)


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
