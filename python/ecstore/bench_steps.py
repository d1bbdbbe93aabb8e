"""python -m ecstore.bench_steps: a step of many small items -- a video's frames, a prompt's
images -- saved and loaded through the connector's data path (ecstore.transfer), embedded and
through a daemon, against one copy of the same total bytes, in one run.

Steps: 1, 8, 32 and 128 items of 2.87 MB (350 x 4096 bf16), and 32 mixed frames of 0.5 to
3 MB. Each rep saves the step's items under new keys, loads them, checks them byte for byte
and erases them. p50 / p99 in ms:
  save  AsyncSaver.save of each item (what save_caches runs), then wait: until every item of
        the step is readable. Limit: the step's bytes copied device->host in one copy into
        pinned memory allocated once.
  load  transfer.load_many of the step's keys, told their row counts (what start_load_caches
        runs). Limit: the step's bytes in one pinned host buffer, written device->host just
        before (as a saved entry is), copied host->device into one fresh tensor.
and where the time goes (p50 ms, each part timed on its own): reload (the same load again:
the entries no longer just saved; in_call: its time inside the one C++ call), lookup
(lookup_many of the step's keys), alloc (the step's tensors: one allocation, split), get (get_into_buffers into tensors allocated beforehand), put (the saver's one
call, put_many_from_buffers of the step's tensors, on this thread), hand (the save() calls
of a save alone: what the caller's thread spends), later (a load of those
20 ms after they were put).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import torch

from .bench import _timed as timed
from .bench import pct, start_daemon

WIDTH = 4096
ROWS_2_87MB = 350
# 32 frames of 0.5 to 3 MB (61 to 366 rows of 4096 bf16), the same in every run.
MIXED = [61 + (i * 97) % 306 for i in range(32)]
STEPS = {"1 x 2.87MB": [ROWS_2_87MB], "8 x 2.87MB": [ROWS_2_87MB] * 8,
         "32 x 2.87MB": [ROWS_2_87MB] * 32, "128 x 2.87MB": [ROWS_2_87MB] * 128,
         "32 mixed": MIXED}


def summary(xs: list[float]) -> dict:
    return {"p50_ms": 1e3 * pct(xs, 0.5), "p99_ms": 1e3 * pct(xs, 0.99)}


def limits(rows: list[int], device: str, reps: int) -> dict:
    """The step's bytes the simplest way: one host->device copy from pinned memory into a
    fresh tensor (load), one device->host copy into pinned memory (save). The load's pinned
    buffers are rotated, each written device->host just before its copy."""
    total = sum(rows)
    src = torch.randn(total, WIDTH, device=device).to(torch.bfloat16)
    cuda = device.startswith("cuda")
    hosts = [torch.empty(total, WIDTH, dtype=torch.bfloat16, pin_memory=cuda)
             for _ in range(min(reps, 4))]
    load, save = [], []
    for r in range(reps):
        h = hosts[r % len(hosts)]
        h.copy_(src)
        if cuda:
            load.append(timed(lambda: torch.empty(total, WIDTH, dtype=torch.bfloat16,
                                                  device=device).copy_(h, non_blocking=True),
                              device))
            save.append(timed(lambda: hosts[0].copy_(src, non_blocking=True), device))
        else:
            load.append(timed(h.clone, device))
            save.append(timed(lambda: hosts[0].copy_(src), device))
    return {"load": summary(load), "save": summary(save)}


def run_store(cache: Any, rows: list[int], device: str, reps: int, tag: str) -> dict:
    """Saves, loads and the load's parts of one step shape through one cache."""
    from ecstore import transfer
    from ecstore.transfer import AsyncSaver, _desc

    saver = AsyncSaver(cache, "steps")
    srcs = [torch.randn(n, WIDTH, device=device).to(torch.bfloat16) for n in rows]
    dev = torch.device(device)
    stream = torch.cuda.current_stream(dev).cuda_stream if device.startswith("cuda") else 0
    parts: dict[str, list[float]] = {p: [] for p in ("save", "load", "reload", "lookup",
                                                     "alloc", "get", "put", "later",
                                                     "in_call", "hand")}
    name = "BF16"
    for r in range(reps):
        keys = [f"{tag}-{r}-{i}" for i in range(len(rows))]

        def save() -> None:
            t0 = time.perf_counter()
            for k, s in zip(keys, srcs):
                saver.save(k, s)
            parts["hand"].append(time.perf_counter() - t0)
            saver.wait()

        got: list = []
        parts["save"].append(timed(save, device))
        parts["load"].append(timed(
            lambda: got.extend(transfer.load_many(cache, "steps", keys, device, rows=rows)),
            device))
        for g, s in zip(got, srcs):
            assert torch.equal(g.view(torch.int16), s.view(torch.int16)), "a load differs"
        inner, real = [0.0], cache._c
        cache._c = _TimedCalls(real, inner)
        parts["reload"].append(timed(
            lambda: transfer.load_many(cache, "steps", keys, device, rows=rows), device))
        cache._c = real
        parts["in_call"].append(inner[0])
        outs: list = []
        parts["lookup"].append(timed(lambda: cache.lookup_many("steps", keys), device))
        parts["alloc"].append(timed(lambda: outs.extend(
            torch.empty(sum(rows), WIDTH, dtype=torch.bfloat16, device=dev).split(rows)),
            device))
        descs = [_desc(o, dev, stream) for o in outs]
        parts["get"].append(timed(lambda: cache._c.get_into_buffers("steps", keys, descs),
                                  device))
        again = [k + "-put" for k in keys]
        items = [(k, name, list(s.shape), _desc(s, dev, stream)) for k, s in zip(again, srcs)]
        parts["put"].append(timed(lambda: cache._c.put_many_from_buffers(
            "steps", items, checksum_when_spilled=True), device))
        time.sleep(0.02)  # the store's background work after the puts (write-back) is done
        parts["later"].append(timed(
            lambda: transfer.load_many(cache, "steps", again, device, rows=rows), device))
        cache.erase_many("steps", keys + again)  # room for the next rep: no spill beside it
    saver.close()
    return {p: summary(v) for p, v in parts.items()}


class _TimedCalls:
    """A cache's extension object whose get_into_buffers calls add up their time in
    total[0]: how much of a load is the one C++ call."""

    def __init__(self, real: Any, total: list[float]):
        self._real, self._total = real, total

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_into_buffers(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._real.get_into_buffers(*args)
        finally:
            self._total[0] += time.perf_counter() - t0


def open_cache(store: str) -> Any:
    import ecstore

    cache = (ecstore.connect(store) if store.startswith(("tcp://", "unix:"))
             else ecstore.open(store, "4GiB", "64GiB"))
    if torch.cuda.is_available():  # as EcStoreConnector does
        cache.register_with_cuda()
    return cache


def print_tables(results: dict) -> None:
    print(f"\nA step's items through ecstore.transfer on {results['device']}: p50 / p99 ms; "
          "ratio = p50 / the limit's p50")
    print(f"{'store':9} {'step':13} {'save':>15} {'limit':>13} {'ratio':>6}"
          f" {'load':>15} {'limit':>13} {'ratio':>6}")
    for store, steps in results["stores"].items():
        for step, m in steps.items():
            lim = results["limits"][step]
            cells = []
            for op in ("save", "load"):
                cells += [f"{m[op]['p50_ms']:.2f} / {m[op]['p99_ms']:.2f}",
                          f"{lim[op]['p50_ms']:.2f} / {lim[op]['p99_ms']:.2f}",
                          f"{m[op]['p50_ms'] / lim[op]['p50_ms']:.2f}x"]
            print(f"{store:9} {step:13} {cells[0]:>15} {cells[1]:>13} {cells[2]:>6}"
                  f" {cells[3]:>15} {cells[4]:>13} {cells[5]:>6}")
    print("\nWhere a step's time goes: p50 ms")
    parts = ("lookup", "alloc", "get", "load", "reload", "in_call", "later", "hand", "put",
             "save")
    print(f"{'store':9} {'step':13} " + " ".join(f"{p:>7}" for p in parts)
          + f" {'copy':>7} {'d2h':>7}")
    for store, steps in results["stores"].items():
        for step, m in steps.items():
            vals = [m[p]["p50_ms"] for p in parts]
            vals += [results["limits"][step][op]["p50_ms"] for op in ("load", "save")]
            print(f"{store:9} {step:13} " + " ".join(f"{v:7.3f}" for v in vals))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--steps", default=",".join(STEPS), help="which steps, comma-separated")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    root = tempfile.mkdtemp(prefix="ecstore-bench-steps-")
    proc, addr = start_daemon(root, pool="8GiB" if device.startswith("cuda") else "2GiB")
    steps = [s for s in STEPS if s in args.steps.split(",")]
    results: dict = {"device": device, "limits": {}, "stores": {}}
    try:
        for step in steps:
            results["limits"][step] = limits(STEPS[step], device, args.reps)
        for name, store in (("embedded", os.path.join(root, "embedded")), ("daemon", addr)):
            if not store:
                continue
            cache = open_cache(store)
            results["stores"][name] = {
                step: run_store(cache, STEPS[step], device, args.reps, f"{name}-{n}")
                for n, step in enumerate(steps)}
            cache.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    print_tables(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
