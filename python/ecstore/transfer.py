"""The connector's data path, without vLLM: asynchronous saves of (CUDA) tensors and loads
into a device. EcStoreConnector uses exactly these; so does the bench where vLLM is absent.

Thread rules: an AsyncSaver's save() and wait() may be called from any thread; its one
worker thread does the store calls.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from typing import Any, Callable

import torch

import ecstore
from ecstore import _tensors


class AsyncSaver:
    """save() returns at once: it records a CUDA event behind the tensor on the caller's
    stream and hands the rest to one worker thread, which puts the tensor as one buffer
    descriptor on its own stream after that event (cache/buffer_io.h's PutFromBuffer): a
    same-host daemon that offers device puts copies the tensor itself, device->host straight
    into its pool (one copy; net/device_put.h); otherwise the bytes are copied device->host
    straight into a reserved block -- pool memory of an embedded store, or a same-host
    daemon's put arena, which the daemon copies into its pool (each registered with CUDA by
    Cache.register_with_cuda) -- and committed; over TCP or RDMA, through a host buffer that
    is then put. Through a daemon that offers landing blocks an entry of 32 MiB or more is
    copied in pieces and committed at once: the daemon copies each piece as it lands, so its
    copy overlaps the GPU's. The tensor is kept alive until its copy has run; the caller must
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
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "ecstore-save")
        self._pending: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()
        self.device_puts = 0  # saves the cache copied out of device memory itself
        self._streams: dict[int, Any] = {}  # the worker's own stream, per device

    def save(self, key: str, tensor: torch.Tensor) -> None:
        src = tensor.detach()
        ready = None
        if src.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record()
        fut = self._pool.submit(self._put, key, src, ready, time.monotonic())
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._finished)

    def _put(self, key: str, src: torch.Tensor, ready: Any, handed: float) -> None:
        try:
            self._put_buffer(key, src, ready)
            if self._on_saved is not None:
                self._on_saved(key, src.numel() * src.element_size(),
                               time.monotonic() - handed)
        except ecstore.Error as e:
            if self._on_error is None:
                raise
            self._on_error(key, e)

    def _put_buffer(self, key: str, src: torch.Tensor, ready: Any) -> None:
        """One descriptor; a CUDA tensor's on the worker's own stream, made to wait for the
        encoder's work (ready) rather than the host."""
        stream = None
        if ready is not None:
            stream = self._streams.get(src.device.index)
            if stream is None:
                stream = self._streams[src.device.index] = torch.cuda.Stream(device=src.device)
            stream.wait_event(ready)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            flat = src.contiguous()
            route = self._cache._c.put_from_buffer(
                self._ns, key, _tensors.dtype_name(src), list(src.shape),
                _desc(flat, src.device, stream.cuda_stream if stream is not None else 0),
                checksum_when_spilled=ready is not None, device_puts=self._device_puts,
                landing=self._landing)
        if route == "cache":
            self.device_puts += 1

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
    one of another dtype or shape), so that the caller looks the entries up."""
    dtype, rest = layout
    outs = [torch.empty((r, *rest), dtype=_tensors.torch_dtype(dtype), device=dev) for r in rows]
    try:
        got = cache._c.get_into_buffers(ns, keys, [_desc(o, dev, stream) for o in outs])
    except ecstore.InvalidArgument:
        return None
    if any(i is not None and (i.dtype != dtype or tuple(i.shape) != tuple(o.shape))
           for i, o in zip(got, outs)):
        return None
    return [None if i is None else o for i, o in zip(got, outs)]


def _desc(t: torch.Tensor, dev: torch.device, stream: int) -> tuple[int, int, int, int]:
    """The buffer descriptor of a tensor: (address, bytes, device, stream); device -1: host
    memory."""
    return (t.data_ptr(), t.numel() * t.element_size(),
            dev.index if dev.type == "cuda" else -1, stream)
