"""The connector's data path, without vLLM: asynchronous saves of (CUDA) tensors and loads
into a device. EcStoreConnector uses exactly these; so does the bench where vLLM is absent.

Thread rules: an AsyncSaver's save() and wait() may be called from any thread; its one
worker thread does the store calls.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from typing import Any, Callable

import torch

import ecstore
from ecstore import _tensors


class AsyncSaver:
    """save() returns at once: it records a CUDA event behind the tensor on the caller's
    stream and queues the rest for one worker thread, which takes every save queued so far
    and puts them in one call of buffer descriptors on its own stream, after their events
    (cache/buffer_io.h's PutManyFromBuffers): a step's saves are one hand-over and, through a
    same-host daemon that offers device puts, one request -- the daemon copies each tensor
    itself, device->host straight into its pool, every copy enqueued before it waits once
    (net/device_put.h); otherwise each tensor is copied device->host straight into a reserved
    block -- pool memory of an embedded store, or a same-host daemon's put arena, which the
    daemon copies into its pool (each registered with CUDA by Cache.register_with_cuda) --
    the copies enqueued together, waited for once, and committed; over TCP or RDMA, through
    a host buffer that is then put. Through a daemon that offers landing blocks an entry of
    32 MiB or more is copied in pieces and committed at once: the daemon copies each piece as
    it lands, so its copy overlaps the GPU's. Each save is told (on_saved) or failed
    (on_error) on its own. The tensor is kept alive until its copy has run; the caller must
    not write to it afterwards (vLLM never changes an encoder output). A CPU tensor is put as
    it is."""

    def __init__(self, cache: ecstore.Cache, ns: str,
                 on_error: Callable[[str, Exception], None] | None = None,
                 on_saved: Callable[[str, int, float], None] | None = None,
                 landing: bool = True,
                 device_puts: bool = True):
        """landing=False: through a daemon, large entries too fill the block first, then
        commit. device_puts=False: never hand the daemon a tensor to copy (ecstore.net's
        PUT_DEVICE); reserve and fill put-arena blocks instead."""
        self._cache, self._ns, self._on_error, self._on_saved = cache, ns, on_error, on_saved
        self._landing, self._device_puts = landing, device_puts
        self._cond = threading.Condition()
        self._queue: list[tuple[str, torch.Tensor, Any, float]] = []  # handed over, not taken
        self._taken = 0  # taken by the worker, not put yet
        self._failure: Exception | None = None  # the first, for wait() when no on_error
        self._closed = False
        self.device_puts = 0  # saves the cache copied out of device memory itself
        self.batches = 0  # calls made: saves handed over together share one
        self._streams: dict[int, Any] = {}  # the worker's own stream, per device
        # Events the worker's stream already waits on, per device, recorded again by later
        # saves (a wait takes the event's state when it is enqueued): no event made and
        # destroyed per save. deque: append and pop need no lock.
        self._events: dict[int, collections.deque] = {}
        self._thread = threading.Thread(target=self._run, name="ecstore-save", daemon=True)
        self._thread.start()

    def save(self, key: str, tensor: torch.Tensor) -> None:
        src = tensor.detach()
        ready = None
        if src.device.type == "cuda":
            try:
                ready = self._events[src.device.index].pop()
            except (KeyError, IndexError):
                ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(src.device))  # the tensor's GPU's stream
        with self._cond:
            if self._closed:
                raise ecstore.InvalidArgument("this saver is closed")
            self._queue.append((key, src, ready, time.monotonic()))
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
                self._taken = len(batch)
            try:
                self._put_batch(batch)
            except Exception as e:  # noqa: BLE001 - told to the caller, the thread goes on
                for key, *_ in batch:
                    self._failed(key, e)
            finally:
                with self._cond:
                    self._taken = 0
                    self._cond.notify_all()

    def _put_batch(self, batch: list[tuple[str, torch.Tensor, Any, float]]) -> None:
        """One call of descriptors; a CUDA tensor's on the worker's own stream of its
        device, made to wait for the encoder's work (its event) rather than the host."""
        items, keep = [], []
        for key, src, ready, _ in batch:
            stream = None
            if ready is not None:
                stream = self._streams.get(src.device.index)
                if stream is None:
                    stream = self._streams[src.device.index] = torch.cuda.Stream(src.device)
                stream.wait_event(ready)
                self._events.setdefault(src.device.index, collections.deque()).append(ready)
            flat = src
            if not src.is_contiguous():
                with torch.cuda.stream(stream) if stream else contextlib.nullcontext():
                    flat = src.contiguous()
                keep.append(flat)  # alive until the call returns
            items.append((key, _tensors.dtype_name(src), list(src.shape),
                          _desc(flat, src.device, stream.cuda_stream if stream else 0)))
        self.batches += 1
        got = self._cache._c.put_many_from_buffers(
            self._ns, items, checksum_when_spilled=any(r is not None for _, _, r, _ in batch),
            device_puts=self._device_puts, landing=self._landing)
        for (key, src, _, handed), route in zip(batch, got):
            if isinstance(route, Exception):
                self._failed(key, route)
                continue
            if route == "cache":
                self.device_puts += 1
            if self._on_saved is not None:
                self._on_saved(key, src.numel() * src.element_size(), time.monotonic() - handed)

    def _failed(self, key: str, e: Exception) -> None:
        if self._on_error is not None:
            self._on_error(key, e)
            return
        with self._cond:
            if self._failure is None:
                self._failure = e

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + self._taken

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until every save handed over so far is in the store (or timeout seconds
        have passed); raises the first failure when no on_error was given."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue and not self._taken, timeout)
            failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def close(self) -> None:
        try:
            self.wait()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()


def load(cache: ecstore.Cache, ns: str, key: str, device: Any) -> torch.Tensor:
    """The entry as a new tensor on `device` (a CUDA device: copied host->device straight
    from the pool under a lease, where the cache reads in place)."""
    return cache.get(ns, key, device=device)


def load_many(cache: ecstore.Cache, ns: str, keys: list[str], device: Any,
              rows: list[int] | None = None) -> list[torch.Tensor]:
    """The entries as new tensors on `device` (CPU or CUDA), a step's loads together, in one
    call of buffer descriptors (get_many_to_device): their disk reads go out as one batch,
    and each cache moves what it can itself. NotFound if one is absent.

    rows: each entry's expected first dimension, where the caller knows it (vLLM's scheduler
    tells the worker each item's embed count). To the GPU, once this process has loaded an
    entry of `ns` (its dtype and other dimensions learned), the buffers are sized from it
    and the lookup before the read -- a round trip to a daemon -- is skipped; the store's
    answer gives each entry's real shape, and a guess that proves wrong is looked up and
    read again, then no longer made for `ns`."""
    if not keys:
        return []
    got = get_many_to_device(cache, ns, keys, torch.device(device or "cpu"), rows)
    missing = [k for k, t in zip(keys, got) if t is None]
    if missing:
        raise ecstore.NotFound(f"no entry for keys {missing} in namespace '{ns}'")
    return got


def get_many_to_device(cache: ecstore.Cache, ns: str, keys: list[str], dev: torch.device,
                       rows: list[int] | None = None) -> list[torch.Tensor | None]:
    """New tensors on `dev` (CPU or CUDA) of the entries' shapes (None where absent), filled
    in one call of buffer descriptors (cache/buffer_io.h), on a GPU after the work on the
    current stream: from a device tier by the store; from a same-host daemon's device pool
    over CUDA IPC; from a pool read in place, each host->device copy enqueued as its entry's
    bytes become readable (a pool hit's while the step's disk reads are in flight, a disk
    read's piece by piece as it lands: cache/device_load.h); elsewhere (TCP, RDMA, a
    cluster) one pipelined get into host memory, then the copies. Returns once they are
    done."""
    stream = 0
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device(dev.type, torch.cuda.current_device())
        stream = torch.cuda.current_stream(dev).cuda_stream
    layouts = cache._row_layouts
    layout = layouts.get(ns) if rows is not None and len(rows) == len(keys) else None
    if layout:
        got = _get_many_sized_by_rows(cache, ns, keys, dev, stream, rows, layout)
        if got is not None:
            return got
        layouts[ns] = False  # a wrong guess: look entries of `ns` up from now on
    for _ in range(3):  # an entry replaced by one of another size meanwhile: look again
        infos = cache.lookup_many(ns, keys)
        outs = [None if i is None else
                torch.empty(list(i.shape), dtype=_tensors.torch_dtype(i.dtype), device=dev)
                for i in infos]
        present = [(k, o) for k, o in zip(keys, outs) if o is not None]
        try:
            got = cache._c.get_into_buffers(ns, [k for k, _ in present],
                                            [_desc(o, dev, stream) for _, o in present])
        except ecstore.InvalidArgument:
            continue
        if any(g is not None and not ecstore._same_layout(g, i)
               for g, i in zip(got, [i for i in infos if i is not None])):
            continue  # smaller now: its tensor would hold a tail the read never wrote
        for i in got:
            if i is not None and i.shape and ns not in layouts:
                layouts[ns] = (i.dtype, tuple(i.shape[1:]))  # what later guesses are sized by
        it = iter(got)
        return [None if o is None or next(it) is None else o for o in outs]
    raise ecstore.Busy(f"entries of {ns} kept changing size while being read")


def _get_many_sized_by_rows(cache: ecstore.Cache, ns: str, keys: list[str], dev: torch.device,
                            stream: int, rows: list[int], layout: tuple[str, tuple[int, ...]]
                            ) -> list[torch.Tensor | None] | None:
    """get_many_to_device into tensors of rows[i] rows of `layout`, without a lookup; None
    where a guess was wrong (an entry larger than its tensor: nothing returned for any; or
    one of another dtype or shape), so that the caller looks the entries up.

    The tensors are views of one allocation for the step (as an encoder's batched output is):
    one call of the allocator and descriptors by arithmetic, not a tensor's attributes per
    item. The allocation is freed when the last of them is."""
    dtype, rest = layout
    flat = torch.empty((sum(rows), *rest), dtype=_tensors.torch_dtype(dtype), device=dev)
    outs = flat.split(rows)
    row_bytes = math.prod(rest) * flat.element_size()
    index = dev.index if dev.type == "cuda" else -1
    at, descs = flat.data_ptr(), []
    for r in rows:
        descs.append((at, r * row_bytes, index, stream))
        at += r * row_bytes
    try:
        got = cache._c.get_into_buffers(ns, keys, descs)
    except ecstore.InvalidArgument:
        return None
    shape = [0, *rest]
    for i, r in zip(got, rows):
        if i is not None:
            shape[0] = r
            if i.dtype != dtype or i.shape != shape:
                return None
    return [None if i is None else o for i, o in zip(got, outs)]


def _desc(t: torch.Tensor, dev: torch.device, stream: int) -> tuple[int, int, int, int]:
    """The buffer descriptor of a tensor: (address, bytes, device, stream); device -1: host
    memory."""
    return (t.data_ptr(), t.numel() * t.element_size(),
            dev.index if dev.type == "cuda" else -1, stream)
