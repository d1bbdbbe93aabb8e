"""The connector's data path, without vLLM: asynchronous saves of (CUDA) tensors and loads
into a device. EcStoreConnector uses exactly these; so does the bench where vLLM is absent.

Thread rules: an AsyncSaver's save() and wait() may be called from any thread; its one
worker thread does the store calls.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Callable

import torch

import ecstore

log = logging.getLogger("ecstore")


class AsyncSaver:
    """save() returns at once: a CUDA tensor is copied into pinned host memory with a
    non-blocking copy on the current stream and an event recorded behind it; a worker
    thread waits for the event and puts the bytes. The source tensor is kept alive until
    its copy has run. A CPU tensor is put as it is (the caller must not change it)."""

    def __init__(self, cache: ecstore.Cache, ns: str,
                 on_error: Callable[[str, Exception], None] | None = None):
        self._cache, self._ns, self._on_error = cache, ns, on_error
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "ecstore-save")
        self._pending: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()

    def save(self, key: str, tensor: torch.Tensor) -> None:
        src = tensor.detach()
        if src.device.type == "cuda":
            host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            host.copy_(src, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            job = (host, done, src)
        else:
            job = (src, None, None)
        fut = self._pool.submit(self._put, key, job)
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._finished)

    def _put(self, key: str, job: tuple) -> None:
        host, done, _src = job
        if done is not None:
            done.synchronize()
        try:
            self._cache.put(self._ns, key, host)
        except ecstore.Error as e:
            if self._on_error is None:
                raise
            self._on_error(key, e)

    def _finished(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending.discard(fut)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until every save handed over so far is in the store; raises the first
        failure when no on_error was given."""
        with self._lock:
            pending = list(self._pending)
        concurrent.futures.wait(pending, timeout=timeout)
        for f in pending:
            if f.done():
                f.result()

    def close(self) -> None:
        self.wait()
        self._pool.shutdown(wait=True)


def load(cache: ecstore.Cache, ns: str, key: str, device: Any) -> torch.Tensor:
    """The entry as a new tensor on `device` (a CUDA device: copied host->device straight
    from the pool under a lease, where the cache reads in place)."""
    return cache.get(ns, key, device=device)
