"""Store lookups for vLLM's scheduler thread, answered off it.

The scheduler asks `ensure_cache_available` for every waiting request on every step, on the
thread that schedules the whole engine: a store call there that waits on the network (a
hung, slow or dead daemon) stalls every request, not just the one that needed the store.
So the connector's scheduler hooks never call the store themselves. A request's items are
pinned on a thread of their own; until the answer is back the request is "not ready yet"
(vLLM defers it a step), and when it has not come back within the budget its items are
misses: the encoder computes them. An answer that comes back after that has its pins
released at once.

    lookups = Lookups(cache, ns, budget_s=0.05)
    got = lookups.ask(request_id, keys)   # None: not back yet, ask again next step
    ...                                    # else {key: Lease, or why not: ABSENT, ...}

Thread rules: ask, release, forget and close from the scheduler thread; pins are taken on
the lookup thread and released on the release thread, which own nothing else.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import ecstore

logger = logging.getLogger(__name__)

# Why a key has no pin: the store does not hold it, the store could not be asked, its
# answer did not come back within the budget, or another engine claimed it and is computing
# it now (its save is due within the claim).
ABSENT, UNAVAILABLE, TIMEOUT, CLAIMED = "absent", "unavailable", "timeout", "claimed"


@dataclass
class _Ask:
    keys: tuple[str, ...]
    started: float
    future: concurrent.futures.Future


class Lookups:
    def __init__(self, cache: ecstore.Cache, ns: str, budget_s: float,
                 on_answer: Callable[[float], None] | None = None, claim_s: float = 0.0,
                 store: str = "the store"):
        """on_answer(seconds): called on the scheduler thread with each answered ask's time
        from asked to answered. claim_s > 0: an absent key is claimed for that long (this
        engine computes it: ABSENT), or found claimed by another engine (CLAIMED). `store`
        names the store in the warnings: one when its lookups start failing (timing out or
        unavailable), one when they answer again."""
        self._cache, self._ns, self._budget, self._on_answer = cache, ns, budget_s, on_answer
        self._store = store
        self._claim = claim_s
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "ecstore-lookup")
        # Prefetches read an embedded store's disk on their thread: not in the pins' way.
        self._prefetcher = concurrent.futures.ThreadPoolExecutor(1, "ecstore-prefetch")
        # A pin's release tells a daemon, which may be the one that hangs.
        self._releaser = concurrent.futures.ThreadPoolExecutor(1, "ecstore-release")
        self._asks: dict[str, _Ask] = {}
        self._keys_out: dict[str, int] = {}  # key -> asks out that cover it
        self.timeouts = 0  # asks answered by the budget, not the store
        self.errors = 0    # keys whose pin failed (the store unreachable, ...)
        self._failing = 0  # asks failed in a row (scheduler thread)
        self._last_error = ""  # why the lookup thread's last failing pin failed

    def ask(self, req_id: str, keys: list[str]) -> dict[str, Any] | None:
        """The request's pins once the store has answered: {key: Lease, or ABSENT or
        UNAVAILABLE}; None while the answer is not back and the budget not spent; every key
        TIMEOUT once it is."""
        ask = self._asks.get(req_id)
        if ask is None or ask.keys != tuple(keys):
            if ask is not None:
                self._take(req_id)
                self._abandon(ask)
            ask = _Ask(tuple(keys), time.monotonic(),
                       self._pool.submit(self._pin_all, list(keys)))
            self._put(req_id, ask)
            # Their disk reads go out together ahead of the step that loads them. A daemon
            # queues the hint and answers at once, so one item is worth it; an embedded store
            # reads on the prefetch thread, so only a batch is.
            if len(keys) > 1 or self._cache.capabilities["prefetch_queued"]:
                self._prefetcher.submit(self._prefetch, list(keys))
        if ask.future.done():
            self._take(req_id)
            got, errors, answered = ask.future.result()
            self.errors += errors
            if self._on_answer is not None:
                self._on_answer(answered - ask.started)
            self._note_health(f"unavailable: {self._last_error}" if errors else None)
            return got
        if time.monotonic() - ask.started < self._budget:
            return None
        self._take(req_id)
        self._abandon(ask)
        self.timeouts += 1
        self._note_health(f"no answer within {self._budget * 1e3:.0f} ms")
        return {k: TIMEOUT for k in keys}

    def _note_health(self, failure: str | None) -> None:
        """One warning when lookups start failing and one when they answer again: a dead
        store fails every key of every step, which must not flood the engine's log."""
        if failure is not None:
            if self._failing == 0:
                logger.warning("ec-store: lookups in %s are failing (%s); items are misses "
                               "(the encoder computes them) until it answers", self._store,
                               failure)
            self._failing += 1
        elif self._failing:
            logger.warning("ec-store: lookups in %s answer again (%d asks failed meanwhile)",
                           self._store, self._failing)
            self._failing = 0

    def asking_for(self, key: str, other_than: str) -> bool:
        """Whether another request's lookup still out covers `key`: its answer will pin it,
        and one pin serves every request (the caller waits a step rather than ask again)."""
        out = self._keys_out.get(key, 0)
        own = self._asks.get(other_than)
        return out > (1 if own is not None and key in own.keys else 0)

    def forget(self, req_id: str) -> None:
        """The request is gone: an answer still to come releases its pins."""
        ask = self._take(req_id)
        if ask is not None:
            self._abandon(ask)

    def _put(self, req_id: str, ask: _Ask) -> None:
        self._asks[req_id] = ask
        for k in set(ask.keys):
            self._keys_out[k] = self._keys_out.get(k, 0) + 1

    def _take(self, req_id: str) -> _Ask | None:
        ask = self._asks.pop(req_id, None)
        if ask is not None:
            for k in set(ask.keys):
                if self._keys_out[k] == 1:
                    del self._keys_out[k]
                else:
                    self._keys_out[k] -= 1
        return ask

    def close(self) -> None:
        for req_id in list(self._asks):
            self.forget(req_id)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._prefetcher.shutdown(wait=False, cancel_futures=True)
        self._releaser.shutdown(wait=True)

    def release(self, lease: Any) -> None:
        """Releases a pin off the calling (scheduler) thread."""
        self._releaser.submit(lease.release)

    def erase(self, key: str) -> None:
        """Erases an entry off the calling thread (after the pins released before it)."""
        def erase() -> None:
            try:
                self._cache.erase(self._ns, key)
            except ecstore.Error as e:
                logger.warning("ec-store: erasing %s failed: %s", key, e)

        self._releaser.submit(erase)

    @staticmethod
    def _abandon(ask: _Ask) -> None:
        def release(f: concurrent.futures.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            for lease in f.result()[0].values():
                if not isinstance(lease, str):
                    lease.release()

        if not ask.future.cancel():
            ask.future.add_done_callback(release)

    def _prefetch(self, keys: list[str]) -> None:
        try:
            self._cache.prefetch(self._ns, keys)
        except ecstore.Error as e:  # a hint; the pins decide
            logger.debug("ec-store: prefetch of %d items failed: %s", len(keys), e)

    def _claim_absent(self, key: str) -> Any:
        """An absent key: ABSENT (this engine computes it: its claim was granted, or claims
        are off), CLAIMED (another engine is computing it), or its pin once it has landed."""
        if self._claim <= 0:
            return ABSENT
        try:
            outcome, _ = self._cache.claim(self._ns, key, self._claim)
        except ecstore.Busy:  # this connection holds its most live claims: compute unclaimed
            return ABSENT
        if outcome == "held":
            return CLAIMED
        if outcome == "present":
            try:
                return self._cache.pin(self._ns, key)
            except ecstore.NotFound:
                return ABSENT
        return ABSENT

    def _pin_all(self, keys: list[str]) -> tuple[dict[str, Any], int, float]:
        got: dict[str, Any] = {}
        errors = 0
        for key in keys:
            try:
                got[key] = self._cache.pin(self._ns, key)
            except ecstore.NotFound:
                got[key] = self._claim_absent(key)
            except ecstore.Error as e:
                logger.debug("ec-store: %s unavailable (%s); computing it", key, e)
                self._last_error = str(e)
                got[key] = UNAVAILABLE
                errors += 1
        return got, errors, time.monotonic()
