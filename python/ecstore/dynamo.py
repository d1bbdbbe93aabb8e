"""Feeds Dynamo's encoder-cache-aware routing from an ec-store node's event stream.

Dynamo (ai-dynamo-runtime 1.6.1) routes multimodal requests by which worker holds each
image's embedding; each worker tells it through a `MultimodalEmbeddingCachePublisher`
(`publish_delta(added_keys, removed_keys)`). `Relay` follows one ec-store daemon's events
(docs/events.md) and publishes, for that node, the keys it started and stopped holding in
any medium (GPU, host or disk), so the router sees the store's contents exactly, evictions
included. Run one relay per node, beside the worker that node serves:

    python -m ecstore.dynamo --events tcp://127.0.0.1:5557 --replay tcp://127.0.0.1:5558 \\
        --endpoint dynamo.encoder.generate --namespace vllm-qwen

It registers its publisher under `--endpoint` (the encode worker's endpoint) with the
discovery backend and event plane Dynamo is given by its usual environment
(DYN_DISCOVERY_BACKEND, DYN_EVENT_PLANE; e.g. etcd and zmq, or mem and zmq on one host).

Needs pyzmq and msgspec (with vLLM) and ai-dynamo-runtime.
"""
from __future__ import annotations

import argparse
import asyncio
from typing import Any, Optional

from ecstore.events import Subscriber


class Relay:
    """One node's events into `publisher` (anything with publish_delta(added, removed)):
    the keys of namespace `ns` (every namespace when None) the node holds, as deltas."""

    def __init__(self, publisher: Any, events: str, replay: Optional[str] = None,
                 ns: Optional[str] = None) -> None:
        self._publisher = publisher
        self._ns = ns
        self.sub = Subscriber([events], [replay])
        if replay:
            self.sub.snapshot()  # what the node holds already
        self._node: Optional[str] = None
        self._told: set[str] = set()
        self.deltas = 0  # publish_delta calls made

    def poll(self, timeout_ms: int = 100) -> tuple[list[str], list[str]]:
        """Applies what has arrived and publishes what changed: (added, removed)."""
        self.sub.poll(timeout_ms)
        node = self.sub.node()
        if node is None:
            return [], []
        held = self.sub.index.keys_at(node, self._ns)
        added, removed = sorted(held - self._told), sorted(self._told - held)
        if added or removed:
            self._publisher.publish_delta(added, removed)
            self.deltas += 1
            self._told = held
        return added, removed

    def close(self) -> None:
        self.sub.close()


async def _run(args: argparse.Namespace) -> None:
    from dynamo.llm import MultimodalEmbeddingCachePublisher
    from dynamo.runtime import DistributedRuntime

    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, args.discovery, "tcp", event_plane=args.event_plane)
    publisher = MultimodalEmbeddingCachePublisher()
    await publisher.create_endpoint(runtime.endpoint(args.endpoint))
    relay = Relay(publisher, args.events, args.replay, args.namespace)
    try:
        while True:
            await loop.run_in_executor(None, relay.poll, 200)
    finally:
        relay.close()
        runtime.shutdown()


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m ecstore.dynamo", description=__doc__.split("\n")[0])
    p.add_argument("--events", required=True, help="the daemon's --events endpoint")
    p.add_argument("--replay", help="the daemon's --events-replay endpoint (gaps, late start)")
    p.add_argument("--endpoint", required=True,
                   help="the Dynamo endpoint to publish for, namespace.component.endpoint")
    p.add_argument("--namespace", help="only this ec-store namespace (default: every one)")
    p.add_argument("--discovery", default="etcd", help="Dynamo's discovery backend (etcd, mem, ...)")
    p.add_argument("--event-plane", default="zmq", help="Dynamo's event plane (zmq or nats)")
    asyncio.run(_run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
