"""A linearizability checker for a cache register, as Knossos and Porcupine check histories:
Wing and Gong's search over the orders that respect real time, with Lowe's memo of (ops
linearized, register state) so no state is searched twice.

The model is one key of a cache: a put sets the value, an erase clears it, a get returns the
value -- or misses, which a cache may always do, so a miss constrains nothing. An operation
that was not acknowledged (a put or an erase that failed: it may have landed, on some places,
at any later time) has no return: it may take effect at any point after its call, or never.

    ops = [Op("put", 1, call=0.0, ret=0.1), Op("get", 1, call=0.2, ret=0.3)]
    assert check(ops) is None          # linearizable; else a string saying what could not be
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NEVER = math.inf  # the return time of an operation that was not acknowledged


@dataclass(frozen=True)
class Op:
    kind: str       # "put", "erase" or "get"
    value: object   # the value put, or the value a get returned (None: a miss)
    call: float
    ret: float = NEVER


def _relevant(ops):
    """What can constrain an order: misses never do; an unacknowledged erase only ever makes
    fewer reads possible, and so does an unacknowledged put whose value nobody read -- both
    may be taken as never having happened."""
    read = {o.value for o in ops if o.kind == "get" and o.value is not None}
    return [o for o in ops
            if not (o.kind == "get" and o.value is None)
            and not (o.ret == NEVER and (o.kind == "erase" or o.value not in read))]


def check_key(ops, initial=None) -> str | None:
    """None where the history of one key is linearizable, else why not."""
    ops = sorted(_relevant(ops), key=lambda o: o.call)
    put = {o.value for o in ops if o.kind == "put"}
    for o in ops:
        if o.kind == "get" and o.value not in put and o.value != initial:
            return f"a get returned {o.value!r}, which no put wrote"
    n = len(ops)
    must = sum(1 << i for i, o in enumerate(ops) if o.ret != NEVER)
    seen = set()
    stack = [(0, initial)]
    while stack:
        done, state = stack.pop()
        if done & must == must:
            return None
        if (done, state) in seen:
            continue
        seen.add((done, state))
        # The next one may be any operation called before every pending one returned.
        first_ret = min(o.ret for i, o in enumerate(ops) if not done >> i & 1)
        for i in range(n):
            o = ops[i]
            if done >> i & 1 or o.call > first_ret:
                continue
            if o.kind == "get" and o.value != state:
                continue
            nxt = o.value if o.kind == "put" else None if o.kind == "erase" else state
            stack.append((done | 1 << i, nxt))
    reads = [o for o in ops if o.kind == "get"]
    return (f"no order of its {n} operations explains its {len(reads)} reads "
            f"(the last read: {reads[-1].value!r} at {reads[-1].call:.3f})" if reads
            else "no order explains it")


def check(history) -> str | None:
    """history: {key: [Op, ...]}; None where every key's is linearizable, else the first
    key's reason."""
    for key, ops in history.items():
        why = check_key(ops)
        if why:
            return f"{key}: {why}"
    return None
