"""Fixtures: a fresh store directory, and a real `ec-store serve` daemon (EC_STORE_BIN).

Every test that starts an `ec-store` process (through a fixture, itself, or a helper of its
module) is marked `daemon`: `pytest -m daemon` runs those alone, as the sanitizer builds do
with a sanitized EC_STORE_BIN."""

import inspect
import os
import re
import signal
import subprocess
import types

import pytest

_STARTS_A_DAEMON = ("start_serve", "_ec_store_bin", "EC_STORE_BIN")


def _starts_a_daemon(obj, depth=2, seen=None):
    """Whether `obj`'s source, or that of a function or class of its module that it names
    (`depth` levels down), starts an ec-store process."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        return False
    if any(t in src for t in _STARTS_A_DAEMON):
        return True
    if depth == 0:
        return False
    module = inspect.getmodule(obj)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src))
    return any(_starts_a_daemon(getattr(module, n), depth - 1, seen) for n in names
               if isinstance(getattr(module, n, None), (types.FunctionType, type))
               and getattr(getattr(module, n), "__module__", None) == module.__name__)


def pytest_configure(config):
    config.addinivalue_line("markers", "daemon: starts an ec-store process")


_DAEMON_FIXTURES = ("daemon", "big_daemon", "device_daemon", "served", "tls_daemon")
_IN_PROCESS = ("embedded", "example", "ecstore-embedded")


def _asks_for_a_daemon(fixture, param):
    """A parametrized fixture that takes a daemon fixture for some of its params: true unless
    this item's param is one of the in-process ones."""
    try:
        src = inspect.getsource(fixture)
    except (OSError, TypeError):
        return False
    asks = any(f'getfixturevalue("{name}")' in src for name in _DAEMON_FIXTURES)
    return asks and not (isinstance(param, str) and param.startswith(_IN_PROCESS))


def pytest_collection_modifyitems(items):
    for item in items:
        defs = [(name, d.func) for name, ds in item._fixtureinfo.name2fixturedefs.items()
                for d in ds]
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (any(name in _DAEMON_FIXTURES for name, _ in defs)
                or any(_starts_a_daemon(f) for f in [item.function] + [f for _, f in defs])
                or any(_asks_for_a_daemon(f, params.get(name)) for name, f in defs)):
            item.add_marker(pytest.mark.daemon)


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
           "pid": proc.pid,
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


def make_pki(directory, *names, server_names="DNS:localhost,DNS:node-1,IP:127.0.0.1"):
    """A CA (ca.crt), a server certificate (server.crt/.key, CN node-1) and a client
    certificate for each of `names` (NAME.crt/.key, CN NAME), made with openssl."""
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.crt"))
    for name, cn, sans in [("server", "node-1", server_names)] + [(n, n, "") for n in names]:
        run("req", *ec, "-subj", f"/CN={cn}", "-keyout", str(directory / f"{name}.key"),
            "-out", str(directory / f"{name}.csr"))
        (directory / f"{name}.ext").write_text(f"subjectAltName={sans}\n" if sans else "")
        run("x509", "-req", "-in", str(directory / f"{name}.csr"), "-CA", str(directory / "ca.crt"),
            "-CAkey", str(directory / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(directory / f"{name}.ext"), "-out", str(directory / f"{name}.crt"))
    return directory


@pytest.fixture
def tls_daemon(tmp_path):
    """A daemon serving TLS with an ACL: "encoder" (its certificate) reads and writes
    namespaces test*, "prefill" only reads them, "ops" may read the stats; client
    certificates are optional, so a client without one proves itself by its secret (here
    "bob-secret": b* only); over the unix socket this user is "local", who reads test*. Yields its tls:// URI, the PKI directory and the ACL file."""
    import hashlib

    pki = make_pki(tmp_path / "pki", "encoder", "prefill", "ops", "stranger")
    bob = hashlib.sha256(b"bob-secret").hexdigest()
    acl = tmp_path / "acl"
    acl.write_text("encoder cert=encoder ns=test* rights=read,write\n"
                   "prefill cert=prefill ns=test* rights=read\n"
                   "ops     cert=ops     ns=*     rights=admin\n"
                   f"bob     secret=sha256:{bob} ns=b* rights=all\n"
                   f"local   uid={os.getuid()} ns=test* rights=read\n")
    for d in _serve(tmp_path, "--tls-cert", str(pki / "server.crt"), "--tls-key",
                    str(pki / "server.key"), "--tls-ca", str(pki / "ca.crt"),
                    "--tls-auth-clients", "optional", "--acl-file", str(acl)):
        yield {"tls": d["tcp"].replace("tcp://", "tls://"), "tcp": d["tcp"], "unix": d["unix"],
               "pki": pki, "acl": acl, "dir": d["dir"]}
