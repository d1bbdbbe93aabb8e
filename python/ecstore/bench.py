"""python -m ecstore.bench: vLLM's ECExampleConnector against EcStoreConnector, same run,
same entries (bf16, 2.87 / 10.6 / 16.5 / 57.8 MB), through vLLM's connector API.

For each connector -- example (one safetensors file per entry, page cache warm and cold),
ecstore embedded, ecstore through a daemon (--daemon ADDR, or EC_STORE_BIN to start one) --
it measures, per entry size, p50 and p99 of:
  save    how long save_caches takes as the model runner sees it
  ready   from save_caches until the entry is readable by a consumer
  load    start_load_caches of one entry into the target device (cuda:0, else CPU; on the
          CPU every page is then touched once, as vLLM's use of the tensor would)
  has     has_cache_item for a present item
and, with a daemon of its own, the scheduler thread's time per hook call with that daemon
healthy, hung and dead, beside ECExampleConnector's os.path.exists;
and the limit for load: the same bytes copied the simplest way into a fresh tensor on the
target device (a pinned host->device copy on a GPU; a memcpy on the CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Callable
from types import SimpleNamespace
from unittest.mock import Mock

import torch

from .bench_report import print_breakdown, print_hooks, print_save_breakdown, print_table

DEVICE = "cpu"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
# One width: a namespace holds one model's encoder outputs (the connector checks hits against it).
SIZES = {"2.87MB": (350, 4096), "10.6MB": (1296, 4096), "16.5MB": (2016, 4096),
         "57.8MB": (7056, 4096)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def config(kind: str, store: str, producer: bool, consumer: bool, more: dict | None = None):
    from vllm.config import VllmConfig

    c = Mock(spec=VllmConfig)
    c.model_config = None
    ec = Mock()
    ec.is_ec_producer, ec.is_ec_consumer = producer, consumer
    # A directory of this harness's embeds a store; an address is passed as it is.
    spec = (f"dir:{os.path.abspath(store)}" if kind == "ecstore" and os.sep in store
            and not store.startswith(("unix:", "dir:", "tcp://")) else store)
    extra = ({"store": spec, "namespace": "bench", "pool_size": "2GiB", "lookup_budget_ms": 10000}
             if kind == "ecstore"
             else {"shared_storage_path": store})
    extra.update(more or {})
    ec.ec_connector_extra_config = extra
    ec.get_from_extra_config = lambda k, d=None: extra.get(k, d)
    c.ec_transfer_config = ec
    return c


class Request:
    def __init__(self, key: str, n: int):
        from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

        self.request_id = "req-" + key
        self.mm_features = [MultiModalFeatureSpec(
            data=None, modality="image", identifier=key,
            mm_position=PlaceholderRange(offset=0, length=n))]
        self._n = n

    def get_num_encoder_embeds(self, i: int) -> int:
        return self._n


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def drop_page_cache(root: str) -> None:
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


class ConnectorHarness:
    """One entry's life through a vLLM connector class: producer save, scheduler
    ensure/has/alloc/meta, worker load."""

    def __init__(self, kind: str, store: str):
        from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
        from vllm.distributed.ec_transfer.ec_connector.example_connector import (
            ECExampleConnector)

        from ecstore.vllm import EcStoreConnector

        cls = EcStoreConnector if kind == "ecstore" else ECExampleConnector
        self.kind = kind
        self.prod = cls(config(kind, store, True, False), ECConnectorRole.WORKER)
        self.sched = cls(config(kind, store, False, True), ECConnectorRole.SCHEDULER)
        self.work = cls(config(kind, store, False, True), ECConnectorRole.WORKER)

    def save(self, key, t):
        self.prod.save_caches(encoder_cache={key: t}, mm_hash=key)

    def wait(self):
        if self.kind == "ecstore":
            self.prod.wait_for_saves()

    def prepare(self, key, n):
        self.req = Request(key, n)
        while not self.sched.ensure_cache_available(self.req, 0):  # once a step, as vLLM asks
            time.sleep(0.0001)

    def has(self, key):
        return self.sched.has_cache_item(key)

    def load(self, key):
        self.sched.update_state_after_alloc(self.req, 0)
        self.work.bind_connector_metadata(self.sched.build_connector_meta(SimpleNamespace()))
        cache = {}
        self.work.start_load_caches(encoder_cache=cache)
        self.work.clear_connector_metadata()
        self.sched.request_finished(self.req)
        return cache[key]

    def close(self):
        for c in (self.prod, self.sched, self.work):
            c.shutdown()


class ExampleStepsHarness:
    """Where vLLM is absent (the GPU machine): ECExampleConnector's exact steps --
    save_file of a CPU copy, os.path.exists, load_file(device=...)."""

    def __init__(self, kind: str, store: str):
        self.root = store

    def path(self, key):
        return os.path.join(self.root, key, "encoder_cache.safetensors")

    def save(self, key, t):
        import safetensors.torch

        os.makedirs(os.path.join(self.root, key), exist_ok=True)
        safetensors.torch.save_file({"ec_cache": t.detach().cpu()}, self.path(key))

    def wait(self):
        pass

    def prepare(self, key, n):
        pass

    def has(self, key):
        return os.path.exists(self.path(key))

    def load(self, key):
        import safetensors.torch

        return safetensors.torch.load_file(self.path(key), device=DEVICE)["ec_cache"]

    def close(self):
        pass


class EcStoreDirectHarness:
    """Where vLLM is absent: the connector's own data path (ecstore.transfer) and a pin
    set, as EcStoreConnector uses them."""

    def __init__(self, kind: str, store: str, landing: bool = True, device_puts: bool = True):
        import ecstore
        from ecstore.transfer import AsyncSaver

        self.cache = (ecstore.connect(store) if store.startswith(("tcp://", "unix:"))
                      else ecstore.open(store, "2GiB", "64GiB"))
        if torch.cuda.is_available():  # as EcStoreConnector does
            self.cache.register_with_cuda()
        self.saver = AsyncSaver(self.cache, "bench", landing=landing, device_puts=device_puts)
        self.pins = {}

    def save(self, key, t):
        self.saver.save(key, t)

    def wait(self):
        self.saver.wait()

    def prepare(self, key, n):
        self.pins[key] = (self.cache.pin("bench", key), n)

    def has(self, key):
        return key in self.pins

    def load(self, key):
        from ecstore import transfer

        pin, rows = self.pins.pop(key)
        # As start_load_caches: told the item's embed count
        t = transfer.load_many(self.cache, "bench", [key], DEVICE, rows=[rows])[0]
        pin.release()
        return t

    def close(self):
        self.saver.close()
        self.cache.close()


def run_connector(name: str, kind: str, store: str, device: str, reps: int,
                  cold: bool = False) -> dict:
    if kind == "ecstore-fill":  # the saver without landing blocks (a GPU and a daemon)
        harness = EcStoreDirectHarness(kind, store, landing=False, device_puts=False)
    elif kind == "ecstore-arena":  # through the put arena with landing blocks
        harness = EcStoreDirectHarness(kind, store, device_puts=False)
    elif HAVE_VLLM:
        harness = ConnectorHarness(kind, store)
    else:
        harness = (EcStoreDirectHarness if kind == "ecstore" else ExampleStepsHarness)(
            kind, store)
    out = {}
    for label, shape in SIZES.items():
        src = torch.randn(shape, dtype=torch.float32).to(torch.bfloat16).to(device)
        save, ready, load, has = [], [], [], []
        for r in range(reps):
            key = f"{label}-{r}-{name}"
            sync(device)
            t0 = time.perf_counter()
            harness.save(key, src)
            t1 = time.perf_counter()
            harness.wait()
            t2 = time.perf_counter()
            save.append(t1 - t0)
            ready.append(t2 - t0)
            harness.prepare(key, shape[0])
            for _ in range(200):
                h0 = time.perf_counter()
                harness.has(key)
                has.append(time.perf_counter() - h0)
            assert harness.has(key)
            if cold:
                drop_page_cache(store)
            sync(device)
            l0 = time.perf_counter()
            got = harness.load(key)
            touch(got, device)
            sync(device)
            load.append(time.perf_counter() - l0)
            assert torch.equal(got.view(torch.int16), src.view(torch.int16))
        out[label] = {m: {"p50_ms": 1e3 * pct(v, 0.5), "p99_ms": 1e3 * pct(v, 0.99)}
                      for m, v in (("save", save), ("ready", ready), ("load", load))}
        out[label]["has"] = {"p50_us": 1e6 * pct(has, 0.5), "p99_us": 1e6 * pct(has, 0.99)}
    harness.close()
    return out


def touch(t: torch.Tensor, device: str) -> None:
    """On the CPU, touches every page once: safetensors' load_file maps the file lazily, so
    without this a 'load' would stop before reading anything. Limit and loads alike."""
    if not device.startswith("cuda"):
        t.reshape(-1).view(torch.uint8)[::4096].sum()  # one byte per page faults every page in


def limit(device: str, reps: int) -> dict:
    """The same bytes the simplest way: a host tensor (pinned on a GPU) copied into a fresh
    tensor on the target device (on the CPU: clone). On a GPU each rep copies a different
    pinned buffer that a device->host copy has just written, as a load copies a pool block
    the saver has just filled: copying one buffer over and over reads it from the CPU's
    cache, which no load of a new entry does."""
    out = {}
    for label, shape in SIZES.items():
        host = [torch.randn(shape).to(torch.bfloat16)]
        if device.startswith("cuda"):
            src = host[0].to(device)
            host = [torch.empty(shape, dtype=torch.bfloat16).pin_memory()
                    for _ in range(min(reps, _LIMIT_BUFFERS))]
        times = []
        for r in range(reps):
            h = host[r % len(host)]
            if device.startswith("cuda"):
                h.copy_(src)  # written device->host just before, as a saved entry is
            sync(device)
            t0 = time.perf_counter()
            if device.startswith("cuda"):
                dst = torch.empty(shape, dtype=torch.bfloat16, device=device)
                dst.copy_(h, non_blocking=True)
            else:
                dst = h.clone()
            touch(dst, device)
            sync(device)
            times.append(time.perf_counter() - t0)
        out[label] = {"p50_ms": 1e3 * pct(times, 0.5), "p99_ms": 1e3 * pct(times, 0.99)}
    return out


# The load limit's pinned buffers, rotated (8 x 57.8 MB: more than a CPU's last-level cache).
_LIMIT_BUFFERS = 8


def limit_save(device: str, reps: int) -> dict:
    """What *ready* is held to on a GPU: the same bytes copied device->host into a pinned
    buffer allocated once (as the pool is), the simplest way an entry can land in host memory.
    On the CPU: a clone."""
    out = {}
    for label, shape in SIZES.items():
        src = torch.randn(shape).to(torch.bfloat16)
        dst = torch.empty(shape, dtype=torch.bfloat16)
        if device.startswith("cuda"):
            src, dst = src.to(device), dst.pin_memory()
        times = []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            sync(device)
            times.append(time.perf_counter() - t0)
        out[label] = {"p50_ms": 1e3 * pct(times, 0.5), "p99_ms": 1e3 * pct(times, 0.99)}
    return out


def _timed(run: Callable[[], Any], device: str) -> float:
    """Seconds `run` takes, the device idle before and waited for after."""
    sync(device)
    t0 = time.perf_counter()
    run()
    sync(device)
    return time.perf_counter() - t0


def load_breakdown(store: str, device: str, reps: int) -> dict:
    """Where a one-entry load's time goes (p50 ms), each part timed on its own on entries
    saved just before: `lookup` (one control round trip to a daemon; a hash lookup
    embedded), `alloc` (the destination tensor), `get` (GetManyToDevice into a tensor
    allocated beforehand: lease, host->device copy, stream wait), `load` (what the connector
    runs: transfer.load_many, told the row count) and `copy` (the limit's copy alone, into a
    tensor allocated beforehand)."""
    import ecstore
    from ecstore import transfer

    cache = (ecstore.connect(store) if store.startswith(("tcp://", "unix:"))
             else ecstore.open(store, "2GiB", "64GiB"))
    cache.register_with_cuda()
    dev = torch.device(device)
    stream = torch.cuda.current_stream(dev).cuda_stream
    out = {}
    for label, shape in SIZES.items():
        parts: dict[str, list[float]] = {p: [] for p in ("lookup", "alloc", "get", "load", "copy")}
        src = torch.randn(shape).to(torch.bfloat16)
        pinned = src.pin_memory()
        for r in range(reps):
            key = f"{label}-{r}-breakdown"
            cache.put("bench", key, src)
            dst = torch.empty(shape, dtype=torch.bfloat16, device=dev)
            n = dst.numel() * dst.element_size()
            for part, run in (
                    ("lookup", lambda: cache.lookup_many("bench", [key])),
                    ("alloc", lambda: torch.empty(shape, dtype=torch.bfloat16, device=dev)),
                    ("get", lambda: cache._c.get_into_buffers(
                        "bench", [key], [(dst.data_ptr(), n, dev.index, stream)])),
                    ("load", lambda: transfer.load_many(cache, "bench", [key], device,
                                                        rows=[shape[0]])),
                    ("copy", lambda: dst.copy_(pinned, non_blocking=True))):
                parts[part].append(_timed(run, device))
        out[label] = {p: 1e3 * pct(v, 0.5) for p, v in parts.items()}
    cache.close()
    return out


def save_breakdown(store: str, device: str, reps: int) -> dict:
    """Where a one-entry save's time goes until the entry is readable (p50 ms), each part
    timed on its own: `handoff` (a no-op handed to a one-thread executor and its result
    taken: the saver's hand-over and wake-up), `put` (the saver's one call, put_many_from_buffers
    of a computed CUDA tensor into a new key, on this thread), `ready` (what the bench's
    ready column times: AsyncSaver.save, then wait) and `copy` (ready's limit:
    device->host into pinned memory)."""
    import concurrent.futures

    import ecstore
    from ecstore import _tensors
    from ecstore.transfer import AsyncSaver, _desc

    cache = (ecstore.connect(store) if store.startswith(("tcp://", "unix:"))
             else ecstore.open(store, "2GiB", "64GiB"))
    cache.register_with_cuda()
    saver = AsyncSaver(cache, "bench")
    worker = concurrent.futures.ThreadPoolExecutor(1)
    dev = torch.device(device)
    stream = torch.cuda.current_stream(dev).cuda_stream
    out = {}
    for label, shape in SIZES.items():
        parts: dict[str, list[float]] = {p: [] for p in ("handoff", "put", "ready", "copy")}
        src = torch.randn(shape, device=dev).to(torch.bfloat16)
        pinned = torch.empty(shape, dtype=torch.bfloat16).pin_memory()
        name, dims = _tensors.dtype_name(src), list(src.shape)
        for r in range(reps):
            key = f"{label}-{r}-save"
            for part, run in (
                    ("handoff", lambda: worker.submit(lambda: None).result()),
                    ("put", lambda: cache._c.put_many_from_buffers(
                        "bench", [(key + "-put", name, dims, _desc(src, dev, stream))],
                        checksum_when_spilled=True)),
                    ("ready", lambda: (saver.save(key, src), saver.wait())),
                    ("copy", lambda: pinned.copy_(src, non_blocking=True))):
                parts[part].append(_timed(run, device))
            # Room for the next: a pool full of entries not yet written back would time the
            # disk (a put waits for a spill), not the save.
            cache.erase_many("bench", [key, key + "-put"])
        out[label] = {p: 1e3 * pct(v, 0.5) for p, v in parts.items()}
    worker.shutdown()
    saver.close()
    cache.close()
    return out


def hook_times(root: str, reps: int) -> dict:
    """The scheduler thread's time in each hook call (ensure_cache_available once a step
    until ready, has_cache_item per item, update_state_after_alloc, build_connector_meta,
    request_finished) for requests of two items, one present, with the daemon healthy, hung
    (SIGSTOP) and dead (SIGKILL), at the default lookup budget; beside ECExampleConnector's
    has_cache_item (an os.path.exists per item), which is all it does on that thread."""
    import signal

    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
    from vllm.distributed.ec_transfer.ec_connector.example_connector import (
        ECExampleConnector)

    from ecstore.vllm import EcStoreConnector

    proc, addr = start_daemon(os.path.join(root, "hooks"), pool="256MiB")
    if not addr:
        return {}
    out = {}
    sched = EcStoreConnector(config("ecstore", addr, False, True, {"lookup_budget_ms": 50}),
                             ECConnectorRole.SCHEDULER)
    try:
        sched.cache.put("bench", "present", torch.ones(400, 3584, dtype=torch.bfloat16))
        for state in ("healthy", "hung", "dead"):
            if state == "hung":
                proc.send_signal(signal.SIGSTOP)
            elif state == "dead":
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            calls, waits, hits = [], [], 0
            for i in range(reps):
                req = Request("present", 400)
                req.request_id = f"{state}-{i}"
                req.mm_features.append(Request(f"absent-{state}-{i}", 400).mm_features[0])
                w, h = _one_request(sched, req, calls)
                waits.append(w)
                hits += h
            out[state] = {"p50_us": pct(calls, 0.5) * 1e6, "p99_us": pct(calls, 0.99) * 1e6,
                          "max_us": max(calls) * 1e6, "calls": len(calls),
                          "wait_p50_ms": pct(waits, 0.5) * 1e3, "hits": hits}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        sched.shutdown()
    files = os.path.join(root, "hooks-example")
    os.makedirs(files, exist_ok=True)
    example = ECExampleConnector(config("example", files, False, True), ECConnectorRole.SCHEDULER)
    calls = []
    for _ in range(reps * 10):
        t = time.perf_counter()
        example.has_cache_item("present")
        calls.append(time.perf_counter() - t)
    out["example-exists"] = {"p50_us": pct(calls, 0.5) * 1e6, "p99_us": pct(calls, 0.99) * 1e6,
                             "max_us": max(calls) * 1e6, "calls": len(calls)}
    return out


def _one_request(sched, req, calls: list) -> tuple[float, int]:
    """One request through the scheduler hooks, a step being 1 ms; appends each call's time
    to `calls`; (how long the request waited to be ready, its hits)."""
    start = time.perf_counter()

    def timed(f, *a):
        t = time.perf_counter()
        r = f(*a)
        calls.append(time.perf_counter() - t)
        return r

    while not timed(sched.ensure_cache_available, req, 0):
        time.sleep(0.001)
    waited = time.perf_counter() - start
    hits = 0
    for i, f in enumerate(req.mm_features):
        if timed(sched.has_cache_item, f.identifier):
            hits += 1
            timed(sched.update_state_after_alloc, req, i)
    timed(sched.build_connector_meta, SimpleNamespace())
    timed(sched.request_finished, req)
    return waited, hits


def start_daemon(root: str, copy_threads: int = -1, pool: str = "2GiB"):
    """On a GPU its pool holds both daemon runs' entries (30 reps: 5.3 GB), so the second
    run's saves do not make room while the first run's spill."""
    binary = os.environ.get("EC_STORE_BIN")
    if not binary:
        return None, None
    proc = subprocess.Popen([binary, "--dir", os.path.join(root, "daemon"), "--pool-size",
                             pool, "serve", "--listen", "127.0.0.1:0", "--copy-threads",
                             str(copy_threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"port (\d+)", proc.stdout.readline())
    return proc, f"tcp://127.0.0.1:{m.group(1)}" if m else None


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where the stores live (default: a temp dir)")
    ap.add_argument("--daemon", default=None, help="address of a running ec-store serve")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--daemon-copy-threads", type=int, default=-1,
                    help="serve --copy-threads of the daemon this bench starts")
    ap.add_argument("--breakdown", action="store_true",
                    help="on a GPU: only where a load's and a save's time go, embedded and "
                         "through the daemon (load_breakdown, save_breakdown)")
    return ap.parse_args()


def main() -> None:
    args = _parse_args()
    global DEVICE
    device = DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"
    root = args.dir or tempfile.mkdtemp(prefix="ecstore-bench-")
    proc, addr = ((None, args.daemon) if args.daemon
                  else start_daemon(root, args.daemon_copy_threads,
                                    "8GiB" if device.startswith("cuda") else "2GiB"))
    if args.breakdown:
        stores = [(name, store) for name, store in (
            ("embedded", os.path.join(root, "bd-embedded")), ("daemon", addr)) if store]
        print_breakdown({name: load_breakdown(store, device, args.reps)
                         for name, store in stores})
        print_save_breakdown({name: save_breakdown(store + ("" if name == "daemon" else "-s"),
                                                   device, args.reps)
                              for name, store in stores})
        if proc:
            proc.terminate()
            proc.wait()
        return
    results = {"device": device, "limit_load": limit(device, args.reps),
               "limit_save": limit_save(device, args.reps)}
    runs = [("example-warm", "example", os.path.join(root, "example"), False),
            ("example-cold", "example", os.path.join(root, "example-cold"), True),
            ("ecstore-embedded", "ecstore", os.path.join(root, "embedded"), False)]
    if addr:
        runs.append(("ecstore-daemon", "ecstore", addr, False))
        if device.startswith("cuda"):  # the saver's other ways: through the put arena
            runs.append(("daemon-arena", "ecstore-arena", addr, False))
            runs.append(("daemon-fill-first", "ecstore-fill", addr, False))
    try:
        for name, kind, store, cold in runs:
            if kind == "example":
                os.makedirs(store, exist_ok=True)
            results[name] = run_connector(name, kind, store, device, args.reps, cold)
        if HAVE_VLLM:
            results["hooks"] = hook_times(root, max(args.reps, 20))
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        if not args.dir:  # its own temp dir: several GB of stores and files
            shutil.rmtree(root, ignore_errors=True)
    if HAVE_VLLM:
        how = "through vLLM's connector classes"
    else:
        how = ("vLLM absent: ECExampleConnector's exact steps, and EcStoreConnector's data "
               "path (ecstore.transfer) with its pin set")
    results["how"] = how
    print_table(results, [name for name, _, _, _ in runs], SIZES)
    print_hooks(results.get("hooks") or {})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
