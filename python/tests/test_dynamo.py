"""ecstore.dynamo against the real ai-dynamo-runtime 1.6.1 on one machine (in-memory
discovery, the ZMQ event plane): a daemon's puts and erases reach a real
MultimodalEmbeddingCachePublisher as deltas, and go out on Dynamo's event plane."""
import asyncio
import os
import socket
import time

import numpy as np
import pytest

import ecstore
from conftest import _serve

zmq = pytest.importorskip("zmq", reason="pyzmq is not installed (vLLM brings it)")
pytest.importorskip("msgspec", reason="msgspec is not installed (vLLM brings it)")
pytest.importorskip("dynamo.llm", reason="ai-dynamo-runtime is not installed "
                    "(scripts/wheel-test-env.sh installs 1.6.1)")
from dynamo.llm import MultimodalEmbeddingCachePublisher  # noqa: E402
from dynamo.runtime import DistributedRuntime  # noqa: E402

from ecstore.dynamo import Relay  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_ports() -> set[int]:
    """TCP ports this process listens on (/proc/net/tcp rows whose inode is one of ours)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            ours.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in ours:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class Recording:
    """The real publisher, with the deltas handed to it kept for the test."""

    def __init__(self, real):
        self.real, self.deltas = real, []

    def publish_delta(self, added, removed):
        self.deltas.append((list(added), list(removed)))
        self.real.publish_delta(added, removed)


def test_a_nodes_puts_and_erases_reach_dynamos_publisher_and_its_event_plane(tmp_path):
    pub_at, rep_at = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    for d in _serve(tmp_path, "--events", pub_at, "--events-replay", rep_at,
                    "--node-id", "enc-0"):
        c = ecstore.connect(d["tcp"])
        c.put("ns", "before", np.zeros(4096, dtype=np.uint8), dtype="U8", shape=[4096])
        try:
            asyncio.run(_relay_through_dynamo(c, pub_at, rep_at))
        finally:
            c.close()


async def _relay_through_dynamo(c, pub_at, rep_at):
    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, "mem", "tcp", event_plane="zmq")
    try:
        before = _listening_ports()
        real = MultimodalEmbeddingCachePublisher()
        await real.create_endpoint(runtime.endpoint("ectest.encoder.gen"))
        ctx = zmq.Context.instance()
        wire = ctx.socket(zmq.SUB)  # Dynamo's event plane, as its router would read it
        wire.setsockopt(zmq.SUBSCRIBE, b"")
        wire.setsockopt(zmq.LINGER, 0)
        for port in _listening_ports() - before:
            wire.connect(f"tcp://127.0.0.1:{port}")
        await asyncio.sleep(0.5)
        rec = Recording(real)
        relay = Relay(rec, pub_at, rep_at, ns="ns")
        assert relay.poll(100) == (["before"], [])  # from the snapshot
        await asyncio.sleep(0.3)  # its SUB socket connects (it would replay what it missed)
        for k in ("img-a", "img-b"):
            c.put("ns", k, np.ones(4096, dtype=np.uint8), dtype="U8", shape=[4096])
        c.put("other", "not-ours", np.ones(16, dtype=np.uint8), dtype="U8", shape=[16])
        c.erase("ns", "before")
        deadline = time.monotonic() + 10
        nudged = time.monotonic()
        while time.monotonic() < deadline and \
                relay.sub.index.keys_at("enc-0", "ns") != {"img-a", "img-b"}:
            await loop.run_in_executor(None, relay.poll, 50)
            if time.monotonic() - nudged > 1:  # a batch after any it missed: a gap, replayed
                c.put("other", "nudge", np.ones(16, dtype=np.uint8), dtype="U8", shape=[16])
                nudged = time.monotonic()
        relay.poll(50)
        added = {k for a, _ in rec.deltas for k in a}
        removed = {k for _, r in rec.deltas for k in r}
        assert added == {"before", "img-a", "img-b"} and removed == {"before"}, rec.deltas
        seen = b""
        while await loop.run_in_executor(None, wire.poll, 2000):
            seen += b"".join(wire.recv_multipart())
            if all(k in seen for k in (b"img-a", b"img-b", b"before")):
                break
        assert all(k in seen for k in (b"img-a", b"img-b", b"before")), seen[:400]
        assert b"not-ours" not in seen
        relay.close()
        wire.close()
    finally:
        runtime.shutdown()
