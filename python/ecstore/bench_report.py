"""The bench's tables (python -m ecstore.bench): the connectors' run, where a load's and a
save's time go, and the scheduler thread's time per hook call."""

from __future__ import annotations


def print_table(results: dict, names: list[str], sizes: dict) -> None:
    """Each connector's save, ready, load and has_cache_item per entry size, load against
    its limit, then the limits."""
    device, how = results["device"], results["how"]
    print(f"device {device}, {how}")
    print("p50 / p99 in ms (has_cache_item in us); load ratio = p50 / limit")
    print(f"{'connector':18} {'size':7} {'save':>13} {'ready':>13} {'load':>13} "
          f"{'load/limit':>10} {'has (us)':>13}")
    for name in names:
        for label in sizes:
            r, lim = results[name][label], results["limit_load"][label]
            f = lambda m: f"{r[m]['p50_ms']:6.2f}/{r[m]['p99_ms']:6.2f}"  # noqa: E731
            ratio = r["load"]["p50_ms"] / lim["p50_ms"]
            # Faster than the same bytes copied the simplest way cannot be: a measuring error.
            flag = "  (below the limit: a measuring error)" if ratio < 0.95 else ""
            print(f"{name:18} {label:7} {f('save'):>13} {f('ready'):>13} {f('load'):>13} "
                  f"{ratio:10.2f} {r['has']['p50_us']:6.2f}/{r['has']['p99_us']:6.2f}{flag}")
    for label in sizes:
        lim, lim_save = results["limit_load"][label], results["limit_save"][label]
        print(f"{'limit (copy)':18} {label:7} {'':>13} "
              f"{lim_save['p50_ms']:6.2f}/{lim_save['p99_ms']:6.2f} "
              f"{lim['p50_ms']:6.2f}/{lim['p99_ms']:6.2f}")
    print("ready's limit: the same bytes copied into pinned host memory (device->host on a GPU)")


def print_parts(title: str, by_store: dict, parts: tuple[str, ...], ratio: tuple[str, str]
                ) -> None:
    """A breakdown's table: each part's p50 per store and size, then ratio[0] / ratio[1]."""
    print(title)
    print(f"{'store':9} {'size':7} " + " ".join(f"{p:>7}" for p in parts)
          + f" {ratio[0] + '/' + ratio[1]:>10}")
    for name, sizes in by_store.items():
        for label, p in sizes.items():
            print(f"{name:9} {label:7} " + " ".join(f"{p[k]:7.3f}" for k in parts)
                  + f" {p[ratio[0]] / p[ratio[1]]:10.2f}")


def print_breakdown(by_store: dict) -> None:
    print_parts("where a load's time goes, p50 in ms (load_breakdown)", by_store,
                ("lookup", "alloc", "get", "load", "copy"), ("load", "copy"))


def print_save_breakdown(by_store: dict) -> None:
    print_parts("where a save's time goes until it is readable, p50 in ms (save_breakdown)",
                by_store, ("handoff", "put", "ready", "copy"), ("ready", "copy"))


def print_hooks(hooks: dict) -> None:
    if not hooks:
        return
    print("the scheduler thread's time per hook call, requests of 2 items (1 present), "
          "lookup budget 50 ms:")
    print(f"{'daemon':16} {'p50 us':>8} {'p99 us':>8} {'max us':>8} {'calls':>6} "
          f"{'ready after':>12} {'hits':>5}")
    for state, r in hooks.items():
        extra = (f"{r['wait_p50_ms']:9.2f} ms {r['hits']:5}" if "hits" in r
                 else "   (os.path.exists per item: ECExampleConnector)")
        print(f"{state:16} {r['p50_us']:8.1f} {r['p99_us']:8.1f} {r['max_us']:8.1f} "
              f"{r['calls']:6} {extra}")
