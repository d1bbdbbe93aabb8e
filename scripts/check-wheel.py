"""Checks a built ecstore wheel: it holds the extension and the package, and imports."""
import subprocess
import sys
import tempfile
import zipfile

wheel = sys.argv[1]
names = zipfile.ZipFile(wheel).namelist()
for need in ("ecstore/__init__.py", "ecstore/vllm.py", "ecstore/_ecstore.pyi"):
    assert need in names, f"{wheel} lacks {need}"
assert any(n.startswith("ecstore/_ecstore.") and n.endswith(".so") for n in names), names
assert not any(n.startswith(("include/", "lib/", "bin/")) for n in names), "C++ install leaked"
with tempfile.TemporaryDirectory() as d:
    zipfile.ZipFile(wheel).extractall(d)
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                    "import ecstore, tempfile; c = ecstore.open(tempfile.mkdtemp(), '4MiB'); "
                    "c.put('n', 'k', b'abcd', dtype='U8', shape=[4]); "
                    "assert bytes(c.get('n', 'k', like='numpy')) == b'abcd'; print('wheel ok')",
                    d], check=True)
