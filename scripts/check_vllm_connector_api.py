#!/usr/bin/env python3
"""Compares the installed vLLM's ECConnectorBase with ecstore.vllm.EcStoreConnector and fails
loudly where vLLM has moved: an abstract method the connector does not implement, or a base
method the connector overrides with parameters the base's callers can no longer pass.
Run with the Python that has vLLM (make python-test runs it in the suite):

    python scripts/check_vllm_connector_api.py
"""
from __future__ import annotations

import inspect
import sys


def _accepts(ours: inspect.Signature, theirs: inspect.Signature) -> str | None:
    """Why a call written against `theirs` would fail against `ours`, or None."""
    params = list(ours.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params) and \
            any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    names = {p.name for p in params}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    for p in theirs.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in names and not var_kw:
            return f"has no parameter {p.name!r}"
    for p in params:
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and \
                p.name not in theirs.parameters:
            return f"requires {p.name!r}, which the base's callers do not pass"
    return None


def main() -> int:
    import vllm
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorBase

    from ecstore.vllm import EcStoreConnector

    problems = []
    missing = sorted(EcStoreConnector.__abstractmethods__)
    for name in missing:
        problems.append(f"{name}: abstract in ECConnectorBase and not implemented")
    checked = 0
    for name, base_fn in inspect.getmembers(ECConnectorBase, callable):
        if name.startswith("__"):
            continue
        ours = getattr(EcStoreConnector, name)
        if ours is base_fn or getattr(ours, "__func__", None) is getattr(base_fn, "__func__", 0):
            continue  # inherited
        checked += 1
        why = _accepts(inspect.signature(ours), inspect.signature(base_fn))
        if why:
            problems.append(f"{name}{inspect.signature(ours)} {why} "
                            f"(vLLM's: {name}{inspect.signature(base_fn)})")
    if problems:
        print(f"EcStoreConnector does not fit vLLM {vllm.__version__}'s ECConnectorBase:",
              file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"EcStoreConnector covers ECConnectorBase of vLLM {vllm.__version__}: "
          f"{checked} overrides checked, no abstract method left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
