"""The connector's data path, without vLLM: asynchronous saves of (CUDA) tensors and loads
into a device. EcStoreConnector uses exactly these; so does the bench where vLLM is absent.

Thread rules: an AsyncSaver's save() and wait() may be called from any thread; its one
worker thread does the store calls.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Callable

import torch

import ecstore
from ecstore import _tensors



class _PinnedBuffers:
    """Reused pinned host buffers (allocating pinned memory costs milliseconds), at most
    `cap` bytes kept."""

    def __init__(self, cap: int = 1 << 30):
        self._free: dict[int, list[torch.Tensor]] = {}
        self._kept, self._cap = 0, cap
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> torch.Tensor:
        with self._lock:
            if self._free.get(nbytes):
                self._kept -= nbytes
                return self._free[nbytes].pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def give(self, buf: torch.Tensor) -> None:
        with self._lock:
            if self._kept + buf.numel() <= self._cap:
                self._free.setdefault(buf.numel(), []).append(buf)
                self._kept += buf.numel()


class AsyncSaver:
    """save() returns at once: it records a CUDA event behind the tensor on the caller's
    stream and hands the rest to one worker thread. Through a same-host daemon that offers
    device puts, that thread waits for the event and has the daemon copy the tensor itself,
    device->host straight into its pool (one copy; net/device_put.h). Otherwise it (on its
    own stream, after that event) copies the bytes device->host straight into a reserved block -- pool memory of
    an embedded store, or a same-host daemon's put arena, which the daemon copies into its
    pool (each registered with CUDA by Cache.register_with_cuda) -- and commits; over TCP,
    into a reused pinned buffer that it then puts. Through a daemon that offers landing
    blocks an entry of 32 MiB or more is copied device->host in pieces and committed at
    once, from a second thread: the daemon copies each piece as it lands, so its copy
    overlaps the GPU's. The tensor is kept alive until its copy has run; the caller must not
    write to it afterwards (vLLM never changes an encoder output). A CPU tensor is put as it
    is."""

    # A landing block's device->host copy: pieces of at least this, at most _MAX_PIECES
    # (each costs an event, a wake-up here and one in the daemon: on the H100 host 1 MiB
    # pieces gained nothing at 10.6-16.5 MB).
    _MIN_PIECE = 4 << 20
    _MAX_PIECES = 16
    # Entries below this fill their block first: the hand-over to the committer thread cost
    # more than the overlap gained (H100 host, `python -m ecstore.bench`, ready p50 at 2.87 /
    # 10.6 MB: 1.00-1.09 / 1.34-1.52 ms landing against 0.80-0.82 / 1.12-1.22 filling first;
    # 57.8 MB: 3.28-3.33 against 3.55-3.88 ms).
    _LANDING_MIN_BYTES = 32 << 20

    def __init__(self, cache: ecstore.Cache, ns: str,
                 on_error: Callable[[str, Exception], None] | None = None,
                 on_saved: Callable[[str, int, float], None] | None = None,
                 landing: bool = True,
                 device_puts: bool = True):
        """landing=False: through a daemon, large entries too fill the block first, then
        commit (one thread). device_puts=False: never hand the daemon a tensor to copy
        (ecstore.net's PUT_DEVICE); reserve and fill put-arena blocks instead."""
        self._cache, self._ns, self._on_error, self._on_saved = cache, ns, on_error, on_saved
        self._landing = landing
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "ecstore-save")
        self._pending: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()
        # Reserve in place: an embedded store, or a same-host daemon (until one answers
        # that it has no put arenas: an older daemon).
        self._reserve = cache.capabilities["reserve"]
        # A same-host daemon that copies device memory itself (until it refuses this
        # process's memory, say a GPU it does not see): one copy, the daemon's.
        self._device_puts = device_puts and cache._device_puts()
        self.device_puts = 0  # saves the daemon copied out of device memory
        self._stream = None
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._buffers = _PinnedBuffers()

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
            if ready is None:
                self._cache.put(self._ns, key, src)
            elif self._device_puts and self._put_device(key, src, ready):
                pass
            elif self._reserve:
                self._put_reserved(key, src, ready)
            else:
                self._put_staged(key, src, ready)
            if self._on_saved is not None:
                self._on_saved(key, src.numel() * src.element_size(),
                               time.monotonic() - handed)
        except ecstore.Error as e:
            if self._on_error is None:
                raise
            self._on_error(key, e)

    def _put_device(self, key: str, src: torch.Tensor, ready: Any) -> bool:
        """The daemon copies the tensor itself, device->host into its pool, once the tensor
        is computed (over CUDA IPC: net/device_put.h). False where it cannot (the tensor is
        not contiguous, or the daemon refused this process's memory: from then on, put
        arenas)."""
        if not src.is_contiguous() or src.numel() == 0:
            return False
        ready.synchronize()  # the daemon's copy engine reads what the encoder wrote
        try:
            self._cache._c.put_device(self._ns, key, _tensors.dtype_name(src), list(src.shape),
                                      src.data_ptr(), src.numel() * src.element_size(),
                                      checksum_when_spilled=True)
        except ecstore.InvalidArgument as e:
            if not ecstore.device_put_refused(e):
                raise
            self._device_puts = False
            return False
        self.device_puts += 1
        return True

    def _side_stream(self, src: torch.Tensor, ready: Any) -> Any:
        """The saver's own stream, made to wait for `ready` (the tensor computed)."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=src.device)
        self._stream.wait_event(ready)
        return self._stream

    def _device_to_host(self, dst: torch.Tensor, src: torch.Tensor, ready: Any) -> None:
        with torch.cuda.stream(self._side_stream(src, ready)):
            dst.copy_(src.contiguous().view(-1).view(torch.uint8), non_blocking=True)
        self._stream.synchronize()

    def _put_reserved(self, key: str, src: torch.Tensor, ready: Any) -> None:
        name = _tensors.dtype_name(src)
        try:
            nbytes = src.numel() * src.element_size()
            landing = self._landing and nbytes >= self._LANDING_MIN_BYTES
            r = self._cache.reserve(self._ns, key, name, list(src.shape), landing=landing)
        except ecstore.InvalidArgument as e:
            if "put arenas" not in str(e):
                raise
            self._reserve = False  # an older daemon: staged puts from now on
            self._put_staged(key, src, ready)
            return
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dst = torch.from_numpy(r.view())
            landing = r.landing()
            if landing is not None:
                self._land_while_committing(r, landing, dst, src, ready)
                return
            self._device_to_host(dst, src, ready)
            del dst
            # Readable at once; hashed by the write-back spill, off this path (hashing 58 MB
            # takes several times the device->host copy).
            r.commit(checksum_when_spilled=True)
        except BaseException:
            r.abandon()
            raise

    def _land_while_committing(self, r: Any, landing: Any, dst: torch.Tensor,
                               src: torch.Tensor, ready: Any) -> None:
        """The device->host copy in pieces, an event behind each; once the tensor is ready,
        the commit goes out on the committer thread and this one marks each piece landed as
        its event completes, for the daemon to copy while the next lands."""
        pieces = []
        with torch.cuda.stream(self._side_stream(src, ready)):
            flat = src.contiguous().view(-1).view(torch.uint8)
            n = flat.numel()
            step = max(self._MIN_PIECE, -(-n // self._MAX_PIECES))
            for at in range(0, n, step):
                end = min(n, at + step)
                dst[at:end].copy_(flat[at:end], non_blocking=True)
                done = torch.cuda.Event()
                done.record(self._stream)
                pieces.append((end, done))
        ready.synchronize()  # the daemon waits for the pieces only, not for the encoder
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(1, "ecstore-commit")
        commit = self._committer.submit(r.commit, checksum_when_spilled=True)
        try:
            for end, done in pieces:
                done.synchronize()
                landing.set(end)
        except BaseException:
            landing.fail()  # the daemon stores nothing; the commit raises
            concurrent.futures.wait([commit])
            self._stream.synchronize()  # no copy still landing once the block is freed
            raise
        commit.result()

    def _put_staged(self, key: str, src: torch.Tensor, ready: Any) -> None:
        nbytes = src.numel() * src.element_size()
        buf = self._buffers.take(nbytes)
        try:
            self._device_to_host(buf, src, ready)
            self._cache.put(self._ns, key, buf, dtype=_tensors.dtype_name(src),
                            shape=list(src.shape))
        finally:
            self._buffers.give(buf)

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
        if self._committer is not None:
            self._committer.shutdown(wait=True)


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
    in one call of buffer descriptors (store/buffer_io.h), on a GPU after the work on the
    current stream: from a device tier by the store; from a same-host daemon's device pool
    over CUDA IPC; from a pool read in place, each host->device copy enqueued as its entry's
    bytes become readable (a pool hit's while the step's disk reads are in flight, a disk
    read's piece by piece as it lands: store/device_load.h); elsewhere (TCP, RDMA, a
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
