#!/usr/bin/env python3
"""Soak test of `ec-store serve`: producers and consumers over TCP and shared memory while the
server is SIGKILLed, SIGHUPed and restarted at random, its disk fills up (ENOSPC) and empties,
and hostile clients connect alongside. At the end:

  * every acknowledged-durable entry reads back byte-exact (a put is acknowledged-durable
    once a SIGHUP sent after it was answered with "persisted" in the server's log),
  * nothing corrupt was ever served (every payload carries its own key; any get that
    succeeds must be byte-exact),
  * the server's RSS and open descriptors stayed bounded.

Usage: soak.py --bin build/ec-store [--seconds 60] [--dir D]
Run as root it mounts a small tmpfs in a private mount namespace (unshare -m) for the store,
so that ENOSPC is the real thing; elsewhere it says so and runs without the disk-full phase.
Needs the ecstore Python package (PYTHONPATH) and numpy.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import ecstore

MiB = 1 << 20
POOL = "32MiB"
TMPFS_BYTES = 256 * MiB  # room for the quota, the index and its WAL
QUOTA = "128MiB"
# Live data the producers keep (they erase their oldest beyond it): below the quota, so the
# store never evicts an entry the soak expects to find.
DATA_LIMIT = 32 * MiB


def payload(key: str, n: int) -> np.ndarray:
    """Bytes derived from the key alone: a get can be checked without any bookkeeping."""
    seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


class Server:
    """One `ec-store serve` at a time, restarted on the same port and directory."""

    def __init__(self, binary: str, store: str, log: str):
        self.binary, self.store, self.log_path = binary, store, log
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.restarts = 0
        self.max_rss = 0
        self.max_fds = 0

    def start(self):
        listen = f"127.0.0.1:{self.port}"
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--dir", self.store, "--pool-size", POOL, "--disk-quota",
             QUOTA, "--listen", listen, "--lease-ttl", "5s", "--log-summary", "0"],
            stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"\(port (\d+)", line)
        if not m:
            raise RuntimeError(f"server did not start: {line!r}; see {self.log_path}")
        self.port = int(m.group(1))

    def kill(self, sig: int):
        self.proc.send_signal(sig)
        if sig != signal.SIGHUP:
            self.proc.wait(timeout=60)
            self.restarts += 1

    def log_text(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def sample(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024
            fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except (OSError, AttributeError):
            return
        self.max_rss = max(self.max_rss, rss)
        self.max_fds = max(self.max_fds, fds)


class Soak:
    def __init__(self, server: Server, seconds: float, disk_full: bool, rss_slack: int):
        self.srv, self.seconds, self.disk_full = server, seconds, disk_full
        self.rss_slack = rss_slack  # bytes the server may hold beyond its pool
        self.lock = threading.Lock()
        self.acked: dict[str, int] = {}  # key -> size, acknowledged by the server
        self.durable: set[str] = set()
        # Acknowledged but not durable when a SIGKILL came: may be gone, must never be wrong.
        self.in_doubt: dict[str, int] = {}
        self.generation = 0  # server lifetimes: bumped before each SIGKILL
        self.written = 0
        self.stop = threading.Event()
        self.paused = threading.Event()  # set while the server is down
        self.counts = {"puts": 0, "put_errors": 0, "gets": 0, "get_misses": 0, "get_errors": 0,
                       "hostile": 0, "sighup": 0, "sigkill": 0, "enospc": 0}
        self.corrupt: list[str] = []

    def count(self, what: str):
        with self.lock:
            self.counts[what] += 1

    def client(self, transport: str):
        uri = (f"unix:{self.srv.store}/serve.sock" if transport == "shm"
               else f"tcp://127.0.0.1:{self.srv.port}")
        return ecstore.connect(uri, transport=transport, timeout=5.0, retries=3)

    def producer(self, pid: int, transport: str):
        rng = random.Random(pid)
        c, i, mine, retry = None, 0, [], []
        unsure, seen_gen = set(), 0  # erased, but maybe not durably: a restart may revive them
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            if seen_gen != self.generation:
                seen_gen = self.generation
                retry.extend(unsure)
                unsure.clear()
            if self.written >= DATA_LIMIT and mine:  # churn: erase the oldest of its own
                old = mine.pop(0)
                with self.lock:  # forgotten first: its fate is unknown if the erase fails
                    if old in self.acked:
                        self.written -= self.acked.pop(old)
                        self.durable.discard(old)
                    else:
                        self.in_doubt.pop(old, None)  # since a SIGKILL: erased all the same
                retry.append(old)
            if retry and (self.written >= DATA_LIMIT or len(retry) > 1):
                # An erase whose tombstone could not be written (a full disk) may come back
                # after a restart: erased again until one succeeds, so live data stays bounded.
                try:
                    c = c or self.client(transport)
                    c.erase("soak", retry[0])
                    unsure.discard(retry.pop(0))
                except ecstore.NotFound:
                    retry.pop(0)
                except ecstore.Error:
                    unsure.add(retry[0])
                    c = None
                    time.sleep(0.05)
                continue
            key = f"p{pid}-{i:06d}"
            n = rng.choice([64 * 1024, 256 * 1024, 1 * MiB, 2 * MiB])
            gen = self.generation
            try:
                c = c or self.client(transport)
                c.put("soak", key, payload(key, n))
            except ecstore.Error:
                self.count("put_errors")
                c = None
                time.sleep(0.05)
                continue
            i += 1
            with self.lock:
                self.counts["puts"] += 1
                if gen != self.generation:  # acknowledged by a server that was then killed
                    self.in_doubt[key] = n
                    continue
                self.acked[key] = n
                self.written += n
            mine.append(key)
            time.sleep(0.01)

    def consumer(self, cid: int, transport: str):
        rng = random.Random(1000 + cid)
        c = None
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            with self.lock:
                keys = list(self.acked.items()) + list(self.in_doubt.items())
            if not keys:
                time.sleep(0.02)
                continue
            key, n = keys[rng.randrange(len(keys))]
            try:
                c = c or self.client(transport)
                got = c.get("soak", key, like="numpy")
            except ecstore.NotFound:
                self.count("get_misses")  # lost in a SIGKILL before it was made durable
                continue
            except ecstore.Error:
                self.count("get_errors")
                c = None
                time.sleep(0.05)
                continue
            self.count("gets")
            if got.nbytes != n or not np.array_equal(got.view(np.uint8).reshape(-1),
                                                     payload(key, n)):
                with self.lock:
                    self.corrupt.append(f"{key} over {transport}")

    def hostile(self):
        """Garbage frames, absurd lengths, wrong tokens, connections left half-open."""
        rng = random.Random(7)
        while not self.stop.is_set():
            time.sleep(0.2)
            if self.paused.is_set():
                continue
            try:
                s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=2)
                kind = rng.randrange(4)
                if kind == 0:
                    s.sendall(os.urandom(rng.randrange(1, 200)))
                elif kind == 1:  # a valid header announcing a 1 TiB body
                    s.sendall(struct.pack("<IHHQQ", 0x31534345, 2, 4, 1, 1 << 40))
                elif kind == 2:  # HELLO with a wrong token
                    body = struct.pack("<I", 5) + b"wrong"
                    s.sendall(struct.pack("<IHHQQ", 0x31534345, 2, 1, 1, len(body)) + body)
                # kind 3: connect and say nothing
                time.sleep(0.05)
                s.close()
                self.count("hostile")
            except OSError:
                pass

    def await_log(self, pattern: str, after: int, timeout: float = 30) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if re.search(pattern, self.srv.log_text()[after:]):
                return True
            time.sleep(0.05)
        return False

    def fill_disk(self, seconds: float):
        """ENOSPC for real: the tmpfs holding the store filled up, then emptied."""
        filler = os.path.join(self.srv.store, "..", "filler")
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * MiB)
        except OSError:
            pass
        self.count("enospc")
        time.sleep(seconds)
        os.unlink(filler)
        if os.environ.get("SOAK_DEBUG"):
            for _ in range(6):
                time.sleep(0.3)
                self.debug_disk("after enospc")

    def debug_disk(self, when: str):
        """SOAK_DEBUG=1: the disk tier as the server sees it, and the filesystem's room."""
        try:
            d = self.client("tcp").stats()["disk"]
            print(f"soak: {when}: file_bytes {d['file_bytes'] / MiB:.0f} MiB, segments "
                  f"{d['segments']}, live {d['bytes'] / MiB:.0f} MiB", flush=True)
        except ecstore.Error as e:
            print("soak: stats", e)
        st = os.statvfs(self.srv.store)
        print(f"soak: {when}: {st.f_bavail * st.f_frsize / MiB:.0f} MiB free", flush=True)

    def chaos(self):
        rng = random.Random(3)
        end = time.time() + self.seconds
        while time.time() < end:
            time.sleep(rng.uniform(1.0, 3.0))
            self.srv.sample()
            if os.environ.get("SOAK_DEBUG"):
                self.debug_disk("before an event")
            event = rng.choice(["sighup", "sighup", "sigkill", "sigkill",
                                "enospc" if self.disk_full else "sighup"])
            if event == "sighup":
                with self.lock:
                    before = set(self.acked)
                mark = len(self.srv.log_text())
                self.srv.kill(signal.SIGHUP)
                if self.await_log(r"SIGHUP: the pool is persisted", mark):
                    with self.lock:  # less what was erased meanwhile
                        self.durable |= before & self.acked.keys()
                self.count("sighup")
            elif event == "sigkill":
                self.paused.set()
                with self.lock:
                    self.generation += 1
                self.srv.kill(signal.SIGKILL)
                with self.lock:  # what was not durable may be gone now
                    for k in [k for k in self.acked if k not in self.durable]:
                        self.written -= self.acked[k]
                        self.in_doubt[k] = self.acked.pop(k)
                self.srv.start()
                self.paused.clear()
                self.count("sigkill")
            else:
                self.fill_disk(rng.uniform(1.0, 3.0))
            if os.environ.get("SOAK_DEBUG"):
                print("soak: event", event, flush=True)

    def run(self) -> int:
        threads = [threading.Thread(target=self.producer, args=(0, "tcp")),
                   threading.Thread(target=self.producer, args=(1, "shm")),
                   threading.Thread(target=self.consumer, args=(0, "tcp")),
                   threading.Thread(target=self.consumer, args=(1, "shm")),
                   threading.Thread(target=self.hostile)]
        for t in threads:
            t.start()
        try:
            self.chaos()
            time.sleep(2)  # puts and gets against a settled server before the final checks
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        return self.verify()

    def verify(self) -> int:
        failures = list(self.corrupt)
        # A last SIGHUP: what is acknowledged now is durable too (the disk has room again).
        with self.lock:
            before = set(self.acked)
        mark = len(self.srv.log_text())
        self.srv.kill(signal.SIGHUP)
        if self.await_log(r"SIGHUP: the pool is persisted", mark):
            self.durable |= before
        self.srv.sample()
        self.srv.kill(signal.SIGKILL)  # the hardest stop: only what is durable survives
        self.srv.start()
        c = self.client("tcp")
        for key in sorted(self.durable):
            try:
                got = c.get("soak", key, like="numpy")
            except ecstore.Error as e:
                failures.append(f"durable {key} lost: {e}")
                continue
            if not np.array_equal(got.view(np.uint8).reshape(-1), payload(key, self.acked[key])):
                failures.append(f"durable {key} is not byte-exact")
        st = c.stats()
        del c
        self.srv.sample()
        self.srv.kill(signal.SIGTERM)
        print(f"soak: {self.seconds:.0f} s, {self.counts}, {len(self.acked)} acknowledged, "
              f"{len(self.durable)} durable and checked, {self.srv.restarts} restarts, "
              f"max RSS {self.srv.max_rss / MiB:.0f} MiB, max fds {self.srv.max_fds}, "
              f"corrupt records dropped {st['corrupt_dropped']}, disk {st['disk']}")
        if self.counts["sighup"] == 0 or self.counts["gets"] == 0 or not self.durable:
            failures.append("the soak did too little to mean anything (no SIGHUP, get or "
                            "durable entry)")
        pool_and_slack = 32 * MiB + self.rss_slack  # the pool, the runtime, connections' buffers
        if self.srv.max_rss > pool_and_slack:
            failures.append(f"server RSS reached {self.srv.max_rss / MiB:.0f} MiB "
                            f"(bound {pool_and_slack / MiB:.0f})")
        if self.srv.max_fds > 256:
            failures.append(f"server held {self.srv.max_fds} descriptors (bound 256)")
        for f in failures:
            print("soak: FAIL", f)
        return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--no-disk-full", action="store_true",
                    help="skip the disk-full (ENOSPC) phase (without root there is no private tmpfs to fill)")
    ap.add_argument("--rss-slack-mib", type=int, default=224,
                    help="what the server may hold beyond its 32 MiB pool (make asan raises it: "
                         "ASan's shadow memory and quarantine count in the RSS)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.no_disk_full:
        print("soak: the disk-full phase is off (--no-disk-full)")
    elif not args.inner and os.geteuid() == 0 and subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode == 0:
        # Again inside a private mount namespace, where a tmpfs can hold the store.
        return subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                               *sys.argv, "--inner"]).returncode
    with tempfile.TemporaryDirectory(prefix="ec-soak-") as tmp:
        disk_full = False
        if args.inner:
            disk_full = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}",
                                        "tmpfs", tmp]).returncode == 0
        if not disk_full and not args.no_disk_full:
            print("soak: no private tmpfs (needs root and unshare -m): the disk-full phase "
                  "is skipped")
        store = os.path.join(tmp, "store")
        srv = Server(args.bin, store, os.path.join(tempfile.gettempdir(),
                                                   f"ec-soak-{os.getpid()}.log"))
        srv.start()
        try:
            rc = Soak(srv, args.seconds, disk_full, args.rss_slack_mib * MiB).run()
        finally:
            if srv.proc and srv.proc.poll() is None:
                srv.proc.kill()
        if rc:
            print(f"soak: server log kept at {srv.log_path}")
        else:
            os.unlink(srv.log_path)
        if disk_full:
            subprocess.run(["umount", tmp])
        return rc


if __name__ == "__main__":
    sys.exit(main())
