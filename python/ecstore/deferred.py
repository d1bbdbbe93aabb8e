"""A store that did not answer when its engine started, connected in the background: both
connectors (vLLM's, SGLang's) start, miss and reconnect rather than fail the engine.

Thread rules: any thread; the connecting thread is the object's own.
"""

from __future__ import annotations

import collections
import logging
import threading

import ecstore

logger = logging.getLogger(__name__)


class Deferred:
    """A daemon that did not answer when the engine started (e.g. an engine unit started
    before ec-store.service is ready): every call raises Unavailable at once, which the
    connectors take as a miss, while a thread of its own tries to connect once a second;
    from then on the calls are the connected Cache's. No caller ever waits on a connect."""

    RETRY_S = 1.0

    def __init__(self, connect):
        self._connect, self._lock = connect, threading.Lock()
        self._cache: ecstore.Cache | None = None
        self._closed = threading.Event()
        self._row_layouts: dict = {}  # transfer.py's guesses, kept here until connected
        threading.Thread(target=self._keep_trying, name="ec-store-connect", daemon=True).start()

    def _keep_trying(self) -> None:
        while not self._closed.wait(self.RETRY_S):
            try:
                cache = self._connect()
            except ecstore.Unavailable:
                continue
            except ecstore.Error as e:  # e.g. a wrong token: said, and tried again
                logger.warning("ec-store: %s", e)
                continue
            with self._lock:
                if self._closed.is_set():
                    cache.close()
                    return
                self._cache = cache
            logger.warning("ec-store: the store answers now; items can hit from here on")
            return

    def _get(self) -> ecstore.Cache:
        cache = self._cache
        if cache is None:
            raise ecstore.Unavailable("the store has not answered since the engine started")
        return cache

    @property
    def capabilities(self) -> dict[str, bool]:
        """Nothing is offered until the store answers."""
        cache = self._cache
        return cache.capabilities if cache is not None else collections.defaultdict(bool)

    def __getattr__(self, name):
        return getattr(self._get(), name)

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._cache is not None:
                self._cache.close()
