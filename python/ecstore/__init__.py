"""ec-store for Python: an encoder-cache store, embedded or through an `ec-store serve` daemon.

    import ecstore, torch
    cache = ecstore.open("/var/cache/ec-store", pool_size="8GiB")     # or ecstore.connect(...)
    cache.put("qwen2.5-vl", mm_hash, torch.randn(400, 3584, dtype=torch.bfloat16))
    t = cache.get("qwen2.5-vl", mm_hash)                        # dtype and shape restored
    with cache.acquire("qwen2.5-vl", mm_hash) as lease:          # zero copy, pinned
        total = lease.tensor().float().sum()

`open` and `connect` return the same Cache class (both bind the C++ ecstore::Cache).
Errors are ecstore.Error subclasses, one per status code (ecstore.NotFound, ...).
Thread rules: a Cache may be shared by threads (a remote one serialises its calls); the
GIL is released during I/O and copies.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from . import _tensors
from ._ecstore import EntryInfo
from . import _ecstore
from .errors import (Busy, Corruption, Error, InvalidArgument, IOError, NoSpace,  # noqa: A004
                     NotFound, PermissionDenied, Unavailable)

__version__ = _ecstore.__version__
# The namespace the `ec-store` CLI uses when none is given (one default for every front end).
DEFAULT_NAMESPACE: str = _ecstore.DEFAULT_NAMESPACE

__all__ = ["open", "connect", "host_buffer", "DEFAULT_NAMESPACE", "__version__", "Cache", "Lease", "EntryInfo",
           "parse_size", "Error",
           "NotFound", "Corruption", "IOError", "NoSpace", "Busy", "InvalidArgument",
           "Unavailable", "PermissionDenied"]


def parse_size(size: int | str) -> int:
    """Bytes from 4096, "256MiB", "8GiB", "1.5G": the CLI's spellings, parsed by the same
    code (base/units.h)."""
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise InvalidArgument(f"size {size!r}: give bytes as an int, or a string like '8GiB'")
    if isinstance(size, int):
        if size < 0:
            raise InvalidArgument(f"size {size} is negative")
        return size
    return _ecstore.parse_size(size)


class Lease:
    """Zero-copy access to an entry: its bytes stay valid and unchanged until release()
    (or the end of the `with` block). Views taken from it keep the entry pinned while they
    live, so a view outliving the block is still safe. A pin (Cache.pin) holds no bytes."""

    def __init__(self, core: Any):
        self._core = core
        self._info = None

    @property
    def info(self) -> EntryInfo:
        if self._info is None:
            self._info = self._core.info
        return self._info

    def view(self) -> Any:
        """The raw bytes: a read-only numpy uint8 array over the pool memory."""
        return self._core.view()

    def array(self) -> Any:
        """The entry as a read-only numpy array of its dtype and shape (no copy)."""
        i = self.info
        return _tensors.typed_view(self.view(), i.dtype, list(i.shape))

    def tensor(self) -> Any:
        """The entry as a torch tensor over the store's memory (no copy; do not write): a
        CPU tensor over the host pool, or a CUDA tensor for a lease from acquire_on_device."""
        i = self.info
        return self._core.torch_view().view(_tensors.torch_dtype(i.dtype)).reshape(i.shape)

    def release(self) -> None:
        self._core.release()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def device_put_refused(e: Exception) -> bool:
    """Whether a put_device failed because this client's device memory cannot be put that
    way (no GPU in the daemon, a GPU it does not see, memory it cannot open), so that the
    bytes should go through host memory instead."""
    return isinstance(e, InvalidArgument) and ("device put" in str(e) or "put arena" in str(e))


def _same_layout(got: Any, expected: Any) -> bool:
    """Whether the entry read (`got`, the info the read returned) is laid out as the buffer
    sized for it (`expected`): otherwise the buffer holds another entry's bytes and a tail
    the read never wrote."""
    return (got.dtype == expected.dtype and list(got.shape) == list(expected.shape)
            and got.bytes == expected.bytes)


class Cache:
    """An ec-store cache: embedded (ecstore.open) or remote (ecstore.connect)."""

    def __init__(self, core: Any):
        self._c = core
        # Namespace -> (dtype, dimensions after the first) of an entry loaded to a GPU, which
        # transfer.load_many sizes its buffers by when told rows; False after a wrong guess.
        self._row_layouts: dict[str, Any] = {}

    @property
    def transport(self) -> str:
        """"local", or the client's transport: "tcp", "shm" or "rdma"."""
        return self._c.transport

    def put(self, ns: str, key: str, value: Any, *, dtype: str | None = None,
            shape: Sequence[int] | None = None) -> None:
        """Stores a torch tensor (any device), a numpy array, or raw bytes (with dtype and
        shape) under (ns, key), replacing an older entry. A put of the bytes, dtype and shape
        the key already holds in the host pool keeps that entry: nothing is written again."""
        if _tensors.is_tensor(value) and value.is_cuda:
            import torch

            t = value.detach().contiguous()
            # One descriptor: the store (or a same-host daemon, through CUDA IPC) copies the
            # tensor itself where it can, else it is staged through host memory; either way
            # after the producer's work queued on the current stream.
            stream = torch.cuda.current_stream(t.device).cuda_stream
            item = (key, dtype.upper() if dtype else _tensors.dtype_name(t),
                    list(shape if shape is not None else t.shape),
                    (t.data_ptr(), t.numel() * t.element_size(), t.device.index, stream))
            got = self._c.put_many_from_buffers(ns, [item])[0]
            if isinstance(got, Exception):
                raise got
            return
        name, dims, flat = _tensors.host_bytes(value, dtype, shape)
        self._c.put(ns, key, name, dims, flat)

    @property
    def capabilities(self) -> dict[str, bool]:
        """What this cache does itself beyond host bytes (the C++ CacheCapabilities):
        device_tier, device_puts, device_leases, in_place_reads, reserve, prefetch,
        prefetch_queued, claims. The package stages the rest through host memory."""
        return self._c.capabilities()

    def _device_puts(self) -> bool:
        """The cache copies device memory itself (put_device): a same-host daemon that
        offers it, until it refuses this process's memory."""
        return self.capabilities["device_puts"]

    def get(self, ns: str, key: str, *, device: Any = None, like: Optional[str] = None) -> Any:
        """The entry as a new tensor (like="torch", on `device`, CPU by default) or numpy
        array (like="numpy"), dtype and shape restored; by default a tensor where torch is
        installed, else an array. Raises NotFound when absent."""
        if device is not None and str(device) != "cpu":
            return self._get_to_device(ns, key, device)

        def alloc(dtype: str, shape: list[int]) -> tuple[Any, Any]:
            out = _tensors.empty(dtype, shape, like)
            return out, _tensors.flat_bytes(out)

        return self._c.get_new(ns, key, alloc)[0]  # sized by the store's own answer

    def _get_to_device(self, ns: str, key: str, device: Any) -> Any:
        """One buffer descriptor (cache/buffer_io.h): the cache reads into the new tensor
        whichever way it can -- a device tier, a same-host daemon's device pool, a pool read
        in place, or staged through host memory."""
        import torch

        got = _transfer().get_many_to_device(self, ns, [key], torch.device(device))[0]
        if got is None:
            raise NotFound(f"no entry for key '{key}' in namespace '{ns}'")
        return got

    def get_into(self, ns: str, key: str, out: Any) -> EntryInfo:
        """Copies the entry's bytes into `out` (a contiguous CPU tensor or array with at
        least its bytes) and returns its metadata."""
        return self._c.get_into(ns, key, _tensors.flat_bytes(out))

    def get_many(self, ns: str, keys: Sequence[str], *,
                 like: Optional[str] = None) -> list[Any]:
        """Several entries in one call (one pipelined batch remotely); None where absent."""
        infos = self._c.lookup_many(ns, list(keys))
        outs = [None if i is None else _tensors.empty(i.dtype, list(i.shape), like)
                for i in infos]
        present = [(k, o) for k, o in zip(keys, outs) if o is not None]
        try:
            got = self._c.get_many(ns, [k for k, _ in present],
                                   [_tensors.flat_bytes(o) for _, o in present])
        except InvalidArgument:
            # An entry replaced by a larger one since the lookup no longer fits its buffer
            # (the batch fails as a whole): each key is read on its own, sized as it is now;
            # a key that is itself invalid raises here too.
            return [self._get_or_none(ns, k, like) for k in keys]
        result, it = [], iter(got)
        for k, i, o in zip(keys, infos, outs):
            g = None if o is None else next(it)
            if g is not None and not _same_layout(g, i):
                # Replaced by an entry of another size since the lookup: read on its own.
                o = self._get_or_none(ns, k, like)
            result.append(None if g is None else o)
        return result

    def _get_or_none(self, ns: str, key: str, like: str) -> Any:
        try:
            return self.get(ns, key, like=like)
        except NotFound:
            return None

    def acquire(self, ns: str, key: str) -> Lease:
        """The entry under a lease, read in place (embedded and same-host shared memory)
        or from a buffer the lease owns (TCP, RDMA)."""
        return Lease(self._c.acquire(ns, key))

    def acquire_many(self, ns: str, keys: Sequence[str]) -> list[Lease | None]:
        """Several entries under leases, read in place; None where absent. An embedded store,
        or a same-host daemon (one request), reads those only on disk into its pool in one
        batch (all reads in flight together), evicting what it must, as get_many does."""
        return [None if raw is None else Lease(raw) for raw in self._c.acquire_many(ns, list(keys))]

    def get_into_parts(self, ns: str, keys: Sequence[str], ptrs: Sequence[Sequence[int]],
                       sizes: Sequence[Sequence[int]]) -> list[tuple[bool, bool, str]]:
        """Reads each entry into pieces of host memory this process owns: ptrs[i][j] and
        sizes[i][j] (addresses, e.g. a CPU tensor's data_ptr(), and byte counts) are entry
        i's pieces in order, which must hold exactly its bytes. One batch; an entry in one
        piece is read straight into it. Result i: (ok, absent, why) -- one key's failure
        raises nothing and costs only that key. The addresses are taken as given: a null one
        (or one whose piece wraps around) raises InvalidArgument before anything is read;
        any other must be memory this process owns, of at least its size."""
        return self._c.get_into_parts(ns, list(keys), [list(p) for p in ptrs],
                                      [list(s) for s in sizes])

    def put_from_parts(self, ns: str, keys: Sequence[str], ptrs: Sequence[Sequence[int]],
                       sizes: Sequence[Sequence[int]]) -> list[tuple[bool, bool, str]]:
        """Stores the bytes of each key's pieces of host memory (as get_into_parts), in
        order, as one flat u8 entry. Result i: (ok, False, why)."""
        return self._c.put_from_parts(ns, list(keys), [list(p) for p in ptrs],
                                      [list(s) for s in sizes])

    def prefetch(self, ns: str, keys: Sequence[str]) -> bool:
        """A hint that `keys` will be read soon: an embedded store reads those only on disk
        into its pool in one batch (all reads in flight together); a daemon queues the hint
        (PREFETCH, answered at once) and does the same on its own thread. It evicts nothing:
        an entry that does not fit the pool's free room now stays on disk until it is read.
        False where it does nothing (an older daemon, or its queue of hints was full)."""
        return self._c.prefetch(ns, list(keys))

    def acquire_on_device(self, ns: str, key: str) -> Lease:
        """The entry leased in the device tier (promoted there from the host pool or disk
        if needed): lease.tensor() is a CUDA tensor over the store's device memory, no
        copy. An embedded store opened with device_pool_size, or a same-host daemon served
        with --device-pool-size (its device pool is opened once over CUDA IPC)."""
        dev = getattr(self, "_device", 0)
        return Lease(self._c.acquire_device(ns, key, dev))

    def pin(self, ns: str, key: str) -> Lease:
        """Keeps the entry resident (never evicted) until the lease is released, without
        moving its bytes."""
        return Lease(self._c.pin(ns, key))

    def lookup(self, ns: str, key: str) -> EntryInfo | None:
        return self._c.lookup(ns, key)

    def lookup_many(self, ns: str, keys: Sequence[str]) -> list[EntryInfo | None]:
        return self._c.lookup_many(ns, list(keys))

    def locate(self, ns: str, keys: Sequence[str]) -> list[list[tuple[str, str]]]:
        """Where each key is held: per key, (node, medium) of every copy, the owner first;
        medium is "device", "pool" or "disk", and node is "" for an embedded store or a
        daemon (a cluster names its nodes). A key held nowhere gets []. Through a cluster
        each key's places are asked in parallel; a node that does not answer is left out."""
        return [list(map(tuple, at)) for at in self._c.locate(ns, list(keys))]

    def contains(self, ns: str, key: str) -> bool:
        return self._c.contains(ns, key)

    def contains_many(self, ns: str, keys: Sequence[str]) -> list[bool]:
        return self._c.contains_many(ns, list(keys))

    def erase(self, ns: str, key: str) -> bool:
        """Removes the entry from every tier; False when it was not there."""
        return self._c.erase(ns, key)

    def erase_many(self, ns: str, keys: Sequence[str]) -> list[bool]:
        """Removes the entries from every tier, their tombstones in one durable write (one
        request per 1024 keys to a server); for each key, whether it was there. Raises
        InvalidArgument for a bad key before erasing anything, and NoSpace when the entries
        were erased but their tombstones could not be made durable yet (a full disk)."""
        return self._c.erase_many(ns, list(keys))

    def list(self, ns: str | None = None) -> list[EntryInfo]:
        return self._c.list(ns)

    def stats(self) -> dict:
        """The store's statistics: the same schema as `ec-store --json stats`."""
        return json.loads(self._c.stats_json())

    def cluster(self) -> dict | None:
        """A cluster client's view (connect("etcd://...")): its members as last seen
        ("nodes", each with the "transport" this client reaches it by, "" before the first
        call), whether that is etcd's current view ("current": false while etcd is away),
        and its counts -- calls routed, misses found at a key's next choice
        ("fallback_hits"), calls a node did not answer ("unavailable"), membership
        changes, and records under the members' prefix that were not a node's, skipped
        ("bad_records"). None for a store or a single daemon."""
        return json.loads(self._c.cluster_json())

    def claim(self, ns: str, key: str, ttl: float = 2.0) -> tuple[str, float]:
        """A claim on a key this caller found absent, so that of several engines missing it
        at once one computes it: ("granted", 0) -- compute and put it; ("held", seconds) --
        another caller is computing it, its put due within that long (then "present"), or
        its claim lapses and the next asker is granted it; ("present", 0) -- read it. Asked
        of the daemon (a cluster: the key's owner); an embedded store grants every claim."""
        outcome, ms_left = self._c.claim(ns, key, max(1, int(ttl * 1000)))
        return outcome, ms_left / 1000.0

    def owners(self, ns: str, key: str, n: int = 1) -> list[str]:
        """A cluster client: the node ids a key is placed on, best first (its owner first)."""
        return self._c.owners(ns, key, n)

    def pool_region(self) -> tuple[int, int, bool]:
        """(address, bytes, read_only) of the host pool as this process sees it: an embedded
        store's pool, or a shared-memory client's read-only mapping of the server's;
        (0, 0, True) over TCP or RDMA."""
        return self._c.pool_region()

    def reserve(self, ns: str, key: str, dtype: str, shape: Sequence[int], *,
                landing: bool = False) -> Any:
        """Space for one entry, to fill in place (reservation.view(), a writable uint8
        array) and then commit() -- e.g. a device->host copy straight into it: an embedded
        store's (CUDA-registered) pool, or a same-host daemon's put arena (shared memory the
        daemon copies from once; reservation.arena() gives its range, to register with
        CUDA). Over TCP, or from a daemon without put arenas: InvalidArgument (use put).
        landing=True, through a same-host daemon that offers it: reservation.landing() is a
        counter to set(n) as the block's first n bytes land, so that commit() can run at
        once on another thread while they do -- the daemon copies each piece as it lands
        (None elsewhere: fill, then commit)."""
        return self._c.reserve(ns, key, dtype.upper(), list(shape), landing)

    def register_with_cuda(self) -> bool:
        """Registers the host pool with CUDA once (cudaHostRegister; read-only for a
        shared-memory client's mapping), so copies between it and the GPU run at pinned
        speed. Undone at close(). A shared-memory client's put arenas (reserve) are
        registered too, each deregistered before it is unmapped. False without CUDA, or
        over TCP/RDMA (no pool here)."""
        if getattr(self, "_cuda_registered", None):
            return True
        try:
            import torch
        except ImportError:
            return False
        addr, size, read_only = self.pool_region()
        if not torch.cuda.is_available() or size == 0:
            return False
        self._c.register_put_memory_with_cuda()  # a same-host client's put arenas, if any
        flags = 8 if read_only else 0  # cudaHostRegisterReadOnly / cudaHostRegisterDefault
        err = torch.cuda.cudart().cudaHostRegister(addr, size, flags)
        if int(err) != 0:
            raise Error(f"cudaHostRegister of the {size}-byte pool failed (CUDA error "
                        f"{int(err)}); host<->device copies would run at pageable speed")
        self._cuda_registered = addr
        return True

    def register_memory(self, buffer: Any) -> None:
        """Registers memory that gets will land in, once -- a tensor (CPU or CUDA) or a
        contiguous array the caller keeps alive and reuses, such as an engine's embedding
        pool or a staging buffer -- so that over RDMA the NIC writes it directly instead of
        through the connection's bounce buffer and a copy (stats()["transfer"] counts
        both). Kept across reconnects until unregister_memory. A no-op where nothing would
        gain (embedded, TCP, shared memory). CUDA memory the NIC cannot reach (no dma-buf
        support or nvidia-peermem) raises Unavailable, saying so."""
        self._c.register_memory(*_memory_range(buffer))

    def unregister_memory(self, buffer: Any) -> None:
        """Undoes register_memory(buffer); call before freeing it."""
        self._c.unregister_memory(*_memory_range(buffer))

    def _unregister_cuda(self) -> None:
        addr = getattr(self, "_cuda_registered", None)
        if addr:
            import torch

            torch.cuda.cudart().cudaHostUnregister(addr)
            self._cuda_registered = None

    def flush(self) -> None:
        """Embedded stores: makes everything put so far durable."""
        self._c.flush()

    def close(self) -> None:
        """Persists an embedded store and closes it (leases still held stay valid; do not
        read their bytes from the GPU after close once the pool is unregistered)."""
        self._unregister_cuda()
        self._c.close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _transfer() -> Any:
    from . import transfer  # needs torch: imported when a GPU is asked for

    return transfer


def _memory_range(buffer: Any) -> tuple[int, int, int]:
    """(address, bytes, CUDA device or -1) of a contiguous tensor, array or buffer."""
    if _tensors.is_tensor(buffer):
        if not buffer.is_contiguous():
            raise InvalidArgument("register_memory needs a contiguous tensor")
        dev = buffer.device.index if buffer.is_cuda else -1
        if buffer.is_cuda and dev is None:
            dev = 0
        return buffer.data_ptr(), buffer.numel() * buffer.element_size(), dev
    import numpy as np

    a = np.asarray(buffer)
    if not a.flags.c_contiguous:
        raise InvalidArgument("register_memory needs a C-contiguous array")
    return a.ctypes.data, a.nbytes, -1


def host_buffer(size: int | str) -> Any:
    """A writable uint8 numpy array of pinned memory, in huge pages where the kernel has them,
    faulted in once: a destination for get_into that reads from disk land in as fast as in the
    store's own pool (torch.from_numpy(buf) shares it). Freed with the array."""
    return _ecstore.host_buffer(parse_size(size))


def open(dir: str, pool_size: int | str = "256MiB", disk_quota: int | str = "16GiB", *,  # noqa: A001
         shareable: bool = False, compress: bool = False, promote_on_get: bool = True,
         device: int = 0, device_pool_size: int | str = 0,
         eviction_policy: str = "freq") -> Cache:
    """Opens (creating if needed) the store in `dir`, in this process. device_pool_size > 0
    adds a device tier on GPU `device`: CUDA tensors put there stay on the GPU, and
    get(device=...) / acquire_on_device read without a host round trip. eviction_policy:
    which entries leave first -- "freq" (fewest recent requests; at the disk quota, times
    recompute cost per byte), "lru" or "gdsf"."""
    c = Cache(_ecstore.open(dir, parse_size(pool_size), parse_size(disk_quota), shareable,
                            compress, promote_on_get, device, parse_size(device_pool_size),
                            eviction_policy))
    c._device = device
    return c


_TLS_KEYS = ("ca", "cert", "key", "server_name")


def _tls_options(uri: str, tls) -> dict | None:
    """connect's tls= as the extension takes it: None (plain), or a dict of _TLS_KEYS."""
    if tls is None or tls is False:
        return {} if uri.startswith("tls://") else None
    if tls is True:
        return {}
    if not isinstance(tls, dict):
        raise InvalidArgument(f"tls={tls!r}: give True or a dict with keys {', '.join(_TLS_KEYS)}")
    unknown = sorted(set(tls) - set(_TLS_KEYS))
    if unknown:
        raise InvalidArgument(f"tls has unknown keys {unknown}: give {', '.join(_TLS_KEYS)}")
    return {k: str(v) for k, v in tls.items() if v is not None}


def _etcd_options(etcd) -> dict:
    keys = ("ca", "cert", "key", "user", "password")
    if etcd is None:
        return {}
    unknown = sorted(set(etcd) - set(keys)) if isinstance(etcd, dict) else ["?"]
    if unknown:
        raise InvalidArgument(f"etcd={etcd!r}: give a dict with keys {', '.join(keys)}")
    return {k: str(v) for k, v in etcd.items() if v is not None}


def connect(uri: str, *, token: str | None = None, transport: str = "auto",
            timeout: float = 5.0, retries: int = 1, put_arena: bool = True,
            connect_timeout: float | None = None, replicas: int = 1,
            tls: bool | dict | None = None, etcd: dict | None = None) -> Cache:
    """Connects to an `ec-store serve` daemon: "tcp://host:port", "host:port",
    "tls://host:port" or "unix:/dir/serve.sock"; or to a cluster of them,
    "etcd://host:port[,host:port]/NAME": each call goes to its key's owner (a node that does
    not answer is a miss); with replicas=R a put goes to the key's first R nodes and a get
    reads the first that answers. Same-host servers are read through shared memory, and put
    to through the connection's put arena (shared memory of at least 64 MiB and twice the
    largest put; put_arena=False: over the socket, and reserve is refused). timeout bounds
    each call (seconds, per attempt), connect_timeout a TCP connection's setup (default:
    timeout); a failed call is tried `retries` more times on a new connection.

    tls=True, or a dict of "ca" (the CA to trust; default the system's), "cert" and "key"
    (a client certificate, for a server that asks for one) and "server_name" (the name the
    server's certificate must carry; default the host), makes the connection TLS; a tls://
    address does too. Through a cluster every node is reached so, and a node's certificate
    must name its node id or its address.

    etcd= reaches a cluster's etcd run with TLS ("etcds://" addresses) and auth: a dict of
    "ca", "cert", "key", "user" and "password"."""
    if not 1 <= replicas <= 16:
        raise InvalidArgument(f"replicas={replicas!r}: write 1 to 16")
    if replicas != 1 and not uri.startswith(("etcd://", "etcds://")):
        raise InvalidArgument(f"replicas={replicas} is for a cluster (etcd://HOST:PORT/NAME); "
                              f"{uri!r} is one daemon")
    return Cache(_ecstore.connect(uri, token or "", transport, timeout, retries, put_arena,
                                  connect_timeout or 0.0, replicas, _tls_options(uri, tls),
                                  _etcd_options(etcd)))
