"""Fixtures: a fresh store directory, and a real `ec-store serve` daemon (EC_STORE_BIN)."""

import os
import re
import signal
import subprocess

import pytest


def _ec_store_bin() -> str:
    path = os.environ.get("EC_STORE_BIN", "")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("EC_STORE_BIN is not set to the ec-store binary (make python-test sets it)")
    return path


def start_serve(directory, *extra, port=0, pool_size="64MiB", stderr=subprocess.PIPE):
    """`ec-store serve` on loopback (port 0: chosen by the kernel); (the process, its first
    line of output, its port)."""
    proc = subprocess.Popen(
        [_ec_store_bin(), "serve", "--dir", str(directory), "--pool-size", pool_size,
         "--listen", f"127.0.0.1:{port}", *extra],
        stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = proc.stdout.readline()
    m = re.search(r"port (\d+)", line)
    if not m:
        proc.kill()
        why = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"ec-store serve did not start: {line!r} {why}")
    return proc, line, int(m.group(1))


def _serve(tmp_path, *extra, pool_size="64MiB"):
    """A daemon on loopback (port chosen by the kernel); yields its tcp:// and unix: URIs, its
    directory and, with --metrics-listen among `extra`, its operator port's base URL."""
    proc, line, port = start_serve(tmp_path / "served", *extra, pool_size=pool_size)
    metrics = re.search(r"metrics port (\d+)", line)
    yield {"tcp": f"tcp://127.0.0.1:{port}",
           "unix": f"unix:{tmp_path / 'served' / 'serve.sock'}",
           "dir": tmp_path / "served",
           "metrics": f"http://127.0.0.1:{metrics.group(1)}" if metrics else None}
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def daemon(tmp_path):
    yield from _serve(tmp_path)


@pytest.fixture
def big_daemon(tmp_path):
    """A daemon whose pool holds the largest encoder outputs several at a time."""
    yield from _serve(tmp_path, pool_size="512MiB")


@pytest.fixture
def device_daemon(tmp_path):
    """A daemon with a 64 MiB device tier (GPU machines only)."""
    yield from _serve(tmp_path, "--device-pool-size", "64MiB")


@pytest.fixture
def served(tmp_path):
    """A daemon with its operator port; yields (tcp uri, unix uri, metrics base url, dir)."""
    for d in _serve(tmp_path, "--metrics-listen", "127.0.0.1:0"):
        yield d["tcp"], d["unix"], d["metrics"], d["dir"]
