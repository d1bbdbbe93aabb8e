"""The vLLM connector's scheduler side: which items of which request are hits, pinned until
the worker has loaded them, and what the worker is to load and save under which keys.

vLLM's scheduler asks `ensure_cache_available(request)` for a request with images once a
step, then `has_cache_item(identifier)` for the same request's items, then
`update_state_after_alloc` for the ones it schedules. No hook here waits on the store:

* The items are pinned on the lookup thread (ecstore/lookups.py); until the answer is back
  the request is "not ready yet" (vLLM asks again next step) and past lookup_budget_ms its
  items are misses. A hit is checked against what the request expects before it is trusted.
* An item the request's ec_transfer_params name as saved by its producer (what the
  producer's `request_finished` returned) is waited for when it is absent: the producer's
  save may still be landing. Until it lands, or saved_wait_ms passes, the request is not
  ready; on the producer's store when it is not ours, the item is pulled from there.
* A request's cache_salt (tenant_salt, default on) scopes its items' store keys, so two
  tenants' identical images are two entries and neither sees the other's.
* One pin per key, whatever the requests: an item already pinned for another request is a
  hit without a lookup, and one that another request's lookup is asking about waits a step
  for that answer.
* A preempted request (its num_preemptions grew): vLLM freed its encoder outputs but not
  its pins, which stay; its misses are looked up again (it may have saved them before it
  was preempted). A running request in chunked prefill is asked about every step too, and
  keeps its decisions.

Thread rules: every method from the scheduler thread; pins are taken on the lookup thread,
pulls run on the pull thread.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import ecstore
from ecstore import vllm_stores
from ecstore.config import parse_store, setting
from ecstore.lookups import ABSENT, CLAIMED, Lookups
from ecstore.vllm_metrics import Recorder

logger = logging.getLogger(__name__)

_RETRY_S = 0.002  # an item being waited for is asked about again this often, at most


def item_key(identifier: str, salt: str | None) -> str:
    """An item's store key: vLLM's identifier (the item's hash), scoped by the request's
    cache_salt where it has one (the salt itself is not in the key, only its hash)."""
    if not salt:
        return identifier
    return f"{identifier}.salt-{hashlib.sha256(salt.encode()).hexdigest()[:16]}"


def reported_source(request: Any, identifier: str) -> dict | None:
    """Where the request's ec_transfer_params say the item was saved (the store, its
    namespace and key), or None where they say nothing of it."""
    params = getattr(request, "ec_transfer_params", None)
    item = params.get(identifier) if isinstance(params, dict) else None
    source = item.get("ec_store") if isinstance(item, dict) else None
    return source if isinstance(source, dict) and source.get("store") else None


@dataclass
class _Pull:
    future: concurrent.futures.Future
    started: float


class SchedulerSide:
    def __init__(self, cache: ecstore.Cache, ns: str, spec: str, extra: dict,
                 stats: Recorder, producer: bool):
        self._cache, self._ns, self._spec, self._stats = cache, ns, spec, stats
        self._producer = producer
        self._fail_open = setting(extra, "fail_open")
        self._salted = setting(extra, "tenant_salt")
        self._saved_wait = setting(extra, "saved_wait_ms")
        # Only a producer claims: the engine that is granted a claim must save what it computes.
        self._claim = setting(extra, "claim_ms") if producer else 0.0
        self._lookups = Lookups(cache, ns, setting(extra, "lookup_budget_ms"),
                                on_answer=lambda s: stats.observe("lookup_seconds", s),
                                claim_s=self._claim, store=spec)
        self._pins: dict[str, list[Any]] = {}  # store key -> [lease, uses]
        # request id -> identifier -> the store key pinned for it, or None (a miss)
        self._decided: dict[str, dict[str, str | None]] = {}
        self._asking: str | None = None  # the request whose items has_cache_item asks about
        self._retry_at: dict[str, float] = {}  # request id -> not asked again before
        self._waits: dict[tuple[str, str], float] = {}  # (request, key) -> waited since
        self._to_load: dict[str, tuple[str, int]] = {}  # identifier -> (key, embeds)
        self._save_as: dict[str, set[str]] = {}  # identifier -> salted keys to save it as
        self._layout: tuple[str, tuple[int, ...]] | None = None  # the namespace's entries'
        self._rejected: set[str] = set()  # keys whose rejection was logged
        self._late: set[str] = set()  # keys whose reported save was logged as never landing
        self._claimed: set[str] = set()  # keys waited for while another engine computes them
        self._puller = concurrent.futures.ThreadPoolExecutor(1, "ecstore-pull")
        self._pulls: dict[str, _Pull] = {}
        self._pulled_done: set[str] = set()
        self._remotes: dict[str, ecstore.Cache] = {}
        self._unavailable: set[str] = set()
        self._preemptions: dict[str, int] = {}  # request -> its preemptions, as last seen

    def key(self, request: Any, identifier: str) -> str:
        return item_key(identifier, getattr(request, "cache_salt", None) if self._salted
                        else None)

    # ------------------------------------------------------------------ the hooks

    def ensure(self, request: Any) -> bool:
        req_id = request.request_id
        self._asking = req_id
        now = time.monotonic()
        if now < self._retry_at.get(req_id, 0.0):
            return False
        decided = self._decided.setdefault(req_id, {})
        preemptions = getattr(request, "num_preemptions", 0)
        if preemptions != self._preemptions.get(req_id, 0):
            # Preempted since it was last asked about: vLLM freed its encoder outputs (its
            # pins are kept). Its misses are asked again: it may have saved them.
            self._preemptions[req_id] = preemptions
            for ident in [i for i, key in decided.items() if key is None]:
                del decided[ident]
        ready = True
        fresh: dict[str, str] = {}  # store key -> identifier
        for feature in request.mm_features:
            ident = feature.identifier
            key = self.key(request, ident)
            if ident in decided or key in fresh:
                continue
            if key in self._pins:  # pinned for another request: one pin serves both
                self._take_pin(key, None)
                decided[ident] = key
                self._stats.count("hits")
                self._stats.count("shared_pins")
                continue
            if self._lookups.asking_for(key, req_id):
                ready = False  # another request's lookup will pin it: its answer first
                continue
            source = reported_source(request, ident)
            if source is not None and source["store"] != self._spec and \
                    not self._pulled(req_id, key, source, ident):
                ready = False  # staging from the producer's store: ask again next step
                continue
            fresh[key] = ident
        if fresh:
            ready = self._decide(request, decided, fresh, now) and ready
        if not ready:
            self._retry_at[req_id] = now + _RETRY_S
        return ready

    def _decide(self, request: Any, decided: dict, fresh: dict[str, str], now: float) -> bool:
        """Decides the fresh items from the lookup thread's answer, once it is back."""
        timeouts = self._lookups.timeouts
        got = self._lookups.ask(request.request_id, list(fresh))
        if got is None:
            return False  # not back yet
        if self._lookups.timeouts > timeouts:
            self._stats.count("lookup_timeouts")
        errors, self._lookups.errors = self._lookups.errors, 0
        if errors:
            self._stats.count("lookup_errors", errors)
            if not self._fail_open:
                raise ecstore.Unavailable(f"ec-store: {errors} item(s) of {request.request_id} "
                                          "could not be looked up (fail_open is false)")
        rows = {f.identifier: request.get_num_encoder_embeds(i)
                for i, f in enumerate(request.mm_features)}
        ready = True
        for key, ident in fresh.items():
            self._pulled_done.discard(key)
            lease = got.get(key, ABSENT)
            why = lease if isinstance(lease, str) else None
            if why == ABSENT and self._awaits_save(request, ident, key, now):
                ready = False
                continue
            if why == CLAIMED:
                if self._awaits_claim(request, key, now):
                    ready = False
                    continue
                why = ABSENT  # the claim outlived its bound: compute it here
            if why is None and not self._fits(key, lease.info, rows.get(ident)):
                self._lookups.release(lease)  # a rejected hit: the encoder computes it
                self._lookups.erase(key)
                why = "rejected"
            hit = self._take_pin(key, None if why else lease)
            decided[ident] = key if hit else None
            if self._waits.pop((request.request_id, key), None) is not None and hit:
                self._stats.count("claim_waits" if key in self._claimed else "saved_waits")
            self._claimed.discard(key)
            self._stats.count("hits" if hit else "misses")
            if not hit and why != "rejected":
                self._stats.count(f"misses_{why}")
        return ready

    def _awaits_claim(self, request: Any, key: str, now: float) -> bool:
        """Whether to wait for an item another engine claimed: within twice the claim's
        length of first finding it claimed (a claim whose holder dies lapses within one, and
        the next ask here is granted it)."""
        self._claimed.add(key)
        started = self._waits.setdefault((request.request_id, key), now)
        return now - started < 2 * self._claim

    def _awaits_save(self, request: Any, ident: str, key: str, now: float) -> bool:
        """Whether an absent item is one the request's params name as saved in this store,
        still within saved_wait_ms of first finding it absent: its save may be landing."""
        source = reported_source(request, ident)
        if source is None or source["store"] != self._spec:
            return False
        started = self._waits.setdefault((request.request_id, key), now)
        if now - started < self._saved_wait:
            return True
        if key not in self._late:
            self._late.add(key)
            logger.warning("ec-store: %s/%s, reported saved by its producer, did not land "
                           "within saved_wait_ms; computing it", self._ns, key)
        return False

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
        self._stats.count("rejected_hits")
        if key not in self._rejected:
            self._rejected.add(key)
            logger.warning("ec-store: entry %s/%s rejected (%s); erased, the item is computed",
                           self._ns, key, why)
        return False

    def has(self, identifier: str) -> bool:
        """Whether the request last asked about has `identifier` pinned (vLLM asks this for
        the items of the request it just asked ensure_cache_available about). Pinned items
        only: what this says is a hit stays loadable until it is freed."""
        key = self._decided.get(self._asking or "", {}).get(identifier)
        return key is not None and key in self._pins

    def after_alloc(self, request: Any, index: int) -> None:
        ident = request.mm_features[index].identifier
        key = self._decided.get(request.request_id, {}).get(ident)
        if key is not None and key in self._pins:
            self._to_load[ident] = (key, request.get_num_encoder_embeds(index))
        elif self._producer:  # computed here: saved under the request's key
            salted = self.key(request, ident)
            if salted != ident:
                self._save_as.setdefault(ident, set()).add(salted)

    def take_meta(self) -> tuple[dict[str, int], dict[str, str], dict[str, list[str]]]:
        """This step's loads (identifier -> embeds), their store keys where not the
        identifier, and the salted keys to save computed items as."""
        loads = {ident: rows for ident, (_, rows) in self._to_load.items()}
        keys = {ident: key for ident, (key, _) in self._to_load.items() if key != ident}
        saves = {ident: sorted(keys) for ident, keys in self._save_as.items()}
        self._to_load.clear()
        self._save_as.clear()
        return loads, keys, saves

    def after_free(self, request: Any, index: int) -> None:
        ident = request.mm_features[index].identifier
        key = self._decided.get(request.request_id, {}).pop(ident, None)
        if key is not None:
            self._unpin(key)

    def finished(self, request: Any) -> None:
        req_id = request.request_id
        self._lookups.forget(req_id)
        self._retry_at.pop(req_id, None)
        self._preemptions.pop(req_id, None)
        for wait in [w for w in self._waits if w[0] == req_id]:
            del self._waits[wait]
        for key in self._decided.pop(req_id, {}).values():
            if key is not None:
                self._unpin(key)
        if self._asking == req_id:
            self._asking = None

    def take_unavailable(self) -> set[str]:
        failed, self._unavailable = self._unavailable, set()
        return failed

    def close(self) -> None:
        self._lookups.close()
        self._puller.shutdown(wait=True)
        for spec, remote in self._remotes.items():
            if parse_store(spec).remote:
                remote.close()
            else:
                vllm_stores.release(spec)
        self._remotes.clear()
        for held in self._pins.values():
            held[0].release()
        self._pins.clear()

    # ------------------------------------------------------------------ pins

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

    # ------------------------------------------------------------------ pulls

    def _pulled(self, req_id: str, key: str, source: dict, ident: str) -> bool:
        """E->PD across hosts: copies the item from the producer's store (named in the
        request's ec_transfer_params) into this one under `key`, in the background, waiting
        up to saved_wait_ms for a save still landing there. True once there is nothing to
        wait for (present here, pulled, or failed: a failed pull fails this request through
        take_unavailable_requests -- retryable, the encode re-runs)."""
        if key in self._pulled_done:
            return True
        now = time.monotonic()
        pull = self._pulls.get(key)
        remote_key = str(source.get("key") or ident)
        if pull is None:
            future = self._puller.submit(self._pull, key, remote_key, source, 0.0)
            self._pulls[key] = _Pull(future, now)
            return False
        if not pull.future.done():
            return False
        try:
            pull.future.result()
        except ecstore.NotFound as e:
            if now - pull.started < self._saved_wait:  # still landing there: again, paced
                pull.future = self._puller.submit(self._pull, key, remote_key, source,
                                                  _RETRY_S)
                return False
            self._pull_failed(req_id, key, source, e)
        except Exception as e:  # noqa: BLE001 - every failure fails the one request
            self._pull_failed(req_id, key, source, e)
        del self._pulls[key]
        self._pulled_done.add(key)  # until its pin is decided
        return True

    def _pull_failed(self, req_id: str, key: str, source: dict, e: Exception) -> None:
        logger.warning("ec-store: pulling %s from %s failed: %s", key, source, e)
        self._unavailable.add(req_id)

    def _pull(self, key: str, remote_key: str, source: dict, pause: float) -> None:
        if pause:
            time.sleep(pause)
        if self._cache.contains(self._ns, key):
            return
        spec = str(source["store"])
        remote = self._remotes.get(spec)
        if remote is None:
            where = parse_store(spec)
            remote = self._remotes[spec] = (
                ecstore.connect(where.target) if where.remote
                else vllm_stores.acquire({"store": spec})[1])
        with remote.acquire(str(source.get("namespace", self._ns)), remote_key) as lease:
            self._cache.put(self._ns, key, lease.tensor())
        self._stats.count("pulls")
