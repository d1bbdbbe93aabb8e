"""ec-store as SGLang's multimodal global embedding cache: ``EcStoreEmbeddingStore``
implements SGLang's ``EmbeddingStore`` (sglang.srt.mem_cache.embedding_store) and is
registered with its ``EmbeddingStoreFactory`` as "ecstore" when this module is imported.

SGLang's ``EmbeddingCacheController`` creates the backend with no arguments, so the store is
named by the environment (docs/sglang.md):

    EC_STORE_URL        the daemon or cluster: unix:/var/cache/ec-store/serve.sock,
                        tcp://host:7070, tls://host:7070 or etcd://host:2379/NAME (required)
    EC_STORE_NAMESPACE  the namespace entries live in (default "sglang"); engines of one
                        model share it, engines of different models must not
    EC_STORE_TOKEN      the daemon's token, if it has one
    EC_STORE_TIMEOUT    seconds one call may take before it counts as a miss (default 1.0)
    EC_STORE_TLS_CA, EC_STORE_TLS_CERT, EC_STORE_TLS_KEY, EC_STORE_TLS_SERVER_NAME
                        TLS to the daemon (docs/security.md): the CA to trust, this engine's
                        client certificate and key, the name the daemon's certificate carries

The controller hands each entry as pieces of its pinned host pool (page runs, one where the
pool is not fragmented): they are read and written as one batch per call, each entry in one
piece straight between the pool and the store (Cache.get_into_parts).

Thread rules: one instance is called from the controller's I/O thread and, for
batch_is_exist, from asyncio's worker threads at the same time; the underlying Cache
serialises a remote connection's calls, and the counters are guarded by a lock.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Sequence

from sglang.srt.mem_cache.embedding_store import EmbeddingStore, EmbeddingStoreFactory

import ecstore
from ecstore.config import parse_seconds
from ecstore.deferred import Deferred
from ecstore.errors import Error as StoreError

logger = logging.getLogger(__name__)

BACKEND_NAME = "ecstore"


def _tls_from_env(url: str) -> dict | None:
    """TLS to the daemon from EC_STORE_TLS_CA, _CERT, _KEY and _SERVER_NAME (any one, or a
    tls:// url, turns it on)."""
    given = {k.lower(): os.environ[f"EC_STORE_TLS_{k}"]
             for k in ("CA", "CERT", "KEY", "SERVER_NAME") if os.environ.get(f"EC_STORE_TLS_{k}")}
    return given if given or url.startswith("tls://") else None


class EcStoreEmbeddingStore(EmbeddingStore):
    """SGLang's EmbeddingStore on an ec-store daemon or cluster. A failure of the store is a
    miss (False) for the keys it touched, logged once per kind of failure, never an
    exception into the engine."""

    def __init__(self, url: str | None = None, namespace: str | None = None, *,
                 cache: ecstore.Cache | None = None, token: str | None = None,
                 timeout: float | None = None):
        url = url or os.environ.get("EC_STORE_URL")
        if cache is None and not url:
            raise ValueError(
                "EcStoreEmbeddingStore: set EC_STORE_URL to the ec-store daemon or cluster "
                "SGLang should use, e.g. unix:/var/cache/ec-store/serve.sock, tcp://HOST:7070 or "
                "etcd://HOST:2379/NAME (docs/sglang.md)")
        if timeout is None:
            timeout = parse_seconds(os.environ.get("EC_STORE_TIMEOUT", "1s"))
        if cache is None:
            def connect() -> ecstore.Cache:
                return ecstore.connect(url, token=token or os.environ.get("EC_STORE_TOKEN"),
                                       timeout=timeout, tls=_tls_from_env(url))

            try:
                cache = connect()
            except ecstore.Unavailable as e:  # a daemon not up yet: misses until it is
                logger.warning("ec-store: %s; keys are misses until it answers", e)
                cache = Deferred(connect)
        self._cache = cache
        self._ns = namespace or os.environ.get("EC_STORE_NAMESPACE") or "sglang"
        self._regions: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._counts = {"hits": 0, "misses": 0, "puts": 0, "skipped_puts": 0, "failures": 0}

    @property
    def cache(self) -> ecstore.Cache:
        return self._cache

    @property
    def namespace(self) -> str:
        return self._ns

    def stats(self) -> dict:
        """Counts since creation: hits and misses of gets, entries put, puts skipped because
        the store held the key already, and keys a failure of the store cost."""
        with self._lock:
            return dict(self._counts)

    # ---- registration: host memory the controller hands pieces of
    def register_buffer(self, tensor: Any) -> None:
        """Notes the host buffer (SGLang's pinned embedding pool) the pointers of later calls
        lie in; a pointer outside every registered buffer is then refused with ValueError
        rather than written through. Device memory is refused: the pool is host memory.
        The buffer is registered with the store's transport too (Cache.register_memory):
        over RDMA, gets land in it without a bounce copy."""
        if getattr(tensor, "is_cuda", False):
            raise ValueError("EcStoreEmbeddingStore.register_buffer: a CUDA tensor; SGLang's "
                             "embedding pool is host memory, register that")
        start = int(tensor.data_ptr())
        self._regions.append((start, start + tensor.numel() * tensor.element_size()))
        try:
            self._cache.register_memory(tensor)
        except StoreError as e:  # gets still work, through the transport's bounce buffer
            self._failed("register", e, 0)

    def _check_pieces(self, ptrs: Sequence[Sequence[int]], sizes: Sequence[Sequence[int]]):
        if len(ptrs) != len(sizes):
            raise ValueError(f"{len(ptrs)} lists of pointers but {len(sizes)} of sizes")
        if not self._regions:
            return
        for ps, ns in zip(ptrs, sizes):
            for p, n in zip(ps, ns):
                if not any(a <= p and p + n <= b for a, b in self._regions):
                    raise ValueError(
                        f"the piece at {p:#x} of {n} bytes lies outside every buffer given to "
                        f"register_buffer; pass pointers into the registered embedding pool")

    # ---- the five batch calls
    def batch_get(self, hashes: list[str], ptrs: list[int], sizes: list[int]) -> list[bool]:
        return self.batch_get_into_multi_buffers(hashes, [[p] for p in ptrs],
                                                 [[s] for s in sizes])

    def batch_put(self, hashes: list[str], ptrs: list[int], sizes: list[int]) -> list[bool]:
        return self.batch_put_from_multi_buffers(hashes, [[p] for p in ptrs],
                                                 [[s] for s in sizes])

    def batch_get_into_multi_buffers(self, hashes: list[str], ptrs: list[list[int]],
                                     sizes: list[list[int]]) -> list[bool]:
        self._check_pieces(ptrs, sizes)
        if not hashes:
            return []
        try:
            got = self._cache.get_into_parts(self._ns, hashes, ptrs, sizes)
        except StoreError as e:
            return self._failed("get", e, len(hashes))
        ok = []
        for h, (done, absent, why) in zip(hashes, got):
            if not done and not absent:
                self._failed("get", why, 1, key=h)
            ok.append(done)
        self._count(hits=sum(ok), misses=len(ok) - sum(ok))
        return ok

    def batch_put_from_multi_buffers(self, hashes: list[str], ptrs: list[list[int]],
                                     sizes: list[list[int]]) -> list[bool]:
        self._check_pieces(ptrs, sizes)
        if not hashes:
            return []
        try:
            # As SGLang's Mooncake backend: an entry the store holds is not sent again.
            held = self._cache.contains_many(self._ns, hashes)
            todo = [i for i, h in enumerate(held) if not h]
            put = self._cache.put_from_parts(self._ns, [hashes[i] for i in todo],
                                             [ptrs[i] for i in todo], [sizes[i] for i in todo])
        except StoreError as e:
            return self._failed("put", e, len(hashes))
        ok = [True] * len(hashes)
        for i, (done, _, why) in zip(todo, put):
            if not done:
                self._failed("put", why, 1, key=hashes[i])
            ok[i] = done
        self._count(puts=sum(ok[i] for i in todo), skipped_puts=len(hashes) - len(todo))
        return ok

    def batch_is_exist(self, hashes: list[str]) -> list[bool]:
        if not hashes:
            return []
        try:
            return list(self._cache.contains_many(self._ns, hashes))
        except StoreError as e:
            return self._failed("lookup", e, len(hashes))

    # ---- failures: a miss, logged once per kind
    def _failed(self, op: str, why: Any, n: int, key: str | None = None) -> list[bool]:
        text = str(why)
        kind = f"{op}: {text.split(':', 1)[0]}"
        with self._lock:
            self._counts["failures"] += n
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            logger.warning("ec-store %s failed%s (%s); counted as a miss, later failures of "
                           "this kind are not logged", op, f" for {key}" if key else "", text)
        return [False] * n

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._counts[k] += v


def register(name: str = BACKEND_NAME) -> None:
    """Registers EcStoreEmbeddingStore with SGLang's EmbeddingStoreFactory under `name`
    (done for "ecstore" on import)."""
    EmbeddingStoreFactory.register_backend(name, __name__, EcStoreEmbeddingStore.__name__)


register()
