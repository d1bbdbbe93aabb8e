"""Checks a built ecstore wheel as a user meets it: a manylinux tag auditwheel agrees with,
the extension, the package and the ec-store binary inside, nothing of the C++ install; then
a fresh venv installs it offline (pip --no-index, numpy from DEPS_DIR), runs
`ec-store --version`, starts a daemon with the installed binary, and uses the installed
package against it.

Usage: python scripts/check-wheel.py WHEEL DEPS_DIR
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import zipfile

wheel, deps = sys.argv[1], sys.argv[2]
name = os.path.basename(wheel)
assert re.search(r"-manylinux_\d+_\d+_x86_64\.whl$", name), f"{name}: not a manylinux wheel"
names = zipfile.ZipFile(wheel).namelist()
for need in ("ecstore/__init__.py", "ecstore/vllm.py", "ecstore/_ecstore.pyi"):
    assert need in names, f"{wheel} lacks {need}"
assert any(n.startswith("ecstore/_ecstore.") and n.endswith(".so") for n in names), names
assert any(n.endswith(".data/scripts/ec-store") for n in names), "no ec-store script"
assert not any(n.startswith(("include/", "lib/", "bin/")) for n in names), "C++ install leaked"
show = subprocess.run([os.path.join(os.path.dirname(sys.executable), "auditwheel"), "show",
                       wheel], capture_output=True, text=True, check=True).stdout
assert "manylinux_" in show, show
# RDMA is loaded at run time (rdma/verbs_api.h): neither vendored nor needed, so the host's
# own libibverbs loads the host's own NIC providers.
assert not any("libibverbs" in n or "librdmacm" in n for n in names), "rdma-core vendored"
# systemd is told through the notify datagram itself: libsystemd and what only it brings
# (libgcrypt, lzma, zstd, libcap) stay out.
extra = [n for n in names if re.search(r"ecstore\.libs/lib(systemd|gcrypt|gpg-error|lzma|zstd|cap)-", n)]
assert not extra, f"vendored only for libsystemd: {extra}"

with tempfile.TemporaryDirectory() as d:
    venv = os.path.join(d, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py, ec = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "ec-store")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", deps, wheel],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    version = subprocess.run([ec, "--version"], capture_output=True, text=True, check=True,
                             env=env).stdout
    assert version.startswith("ec-store "), version
    site = subprocess.run([py, "-c", "import ecstore._ecstore as m; print(m.__file__)"],
                          capture_output=True, text=True, check=True, env=env, cwd=d).stdout
    for binary in (ec, site.strip()):
        linked = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        assert "libibverbs" not in linked and "librdmacm" not in linked, (binary, linked)
    daemon = subprocess.Popen([ec, "--dir", os.path.join(d, "store"), "--pool-size", "64MiB",
                               "serve", "--listen", "127.0.0.1:0"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = re.search(r"port (\d+)", daemon.stdout.readline()).group(1)
        subprocess.run([py, "-c", "import ecstore, sys; c = ecstore.connect(sys.argv[1]); "
                        "c.put('n', 'k', b'abcd', dtype='U8', shape=[4]); "
                        "assert bytes(c.get('n', 'k', like='numpy')) == b'abcd'; c.close()",
                        f"tcp://127.0.0.1:{port}"], check=True, env=env, cwd=d)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0, "the installed daemon did not stop cleanly"
    finally:
        if daemon.poll() is None:
            daemon.kill()
print(f"wheel ok: {name} installs offline, its ec-store serves, its package talks to it")
