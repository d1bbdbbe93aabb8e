"""The README's quick start, run as a user pastes it: its shell and Python blocks in order
(the daemon's directory, pool and port swapped for the test's own, nothing else), and its
vLLM flag parsed by vLLM's own ECTransferConfig and resolved to EcStoreConnector by vLLM's
factory, which then serves a hit from that daemon."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import _ec_store_bin

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def quick_start_blocks():
    text = open(README, encoding="utf-8").read()
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start)]
    return re.findall(r"```(sh|python)\n(.*?)```", section, re.S)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_readmes_quick_start_runs_as_written(tmp_path):
    pytest.importorskip("torch", reason="the quick start's Python uses torch")
    port = free_port()
    where = str(tmp_path / "ec")

    def adapt(code):
        return (code.replace("/var/cache/ec-store", where).replace("8GiB", "64MiB")
                .replace("127.0.0.1:7070", f"127.0.0.1:{port}")
                .replace("serve &", f"serve --listen 127.0.0.1:{port} &"))

    blocks = quick_start_blocks()
    assert [kind for kind, _ in blocks] == ["sh", "python", "sh", "sh"], blocks
    env = dict(os.environ, PATH=os.path.dirname(_ec_store_bin()) + os.pathsep + os.environ["PATH"])
    daemon_line = adapt(blocks[0][1]).strip()
    assert daemon_line.endswith("&") or "&    #" in daemon_line
    daemon = subprocess.Popen(["bash", "-c", "exec " + daemon_line.split("&")[0]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "port" in daemon.stdout.readline()
        subprocess.run([sys.executable, "-c", adapt(blocks[1][1])], env=env, check=True)
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", adapt(blocks[2][1])], env=env,
                             check=True, capture_output=True, text=True).stdout
        assert "img-1" in out and "qwen" in out, out
        _the_vllm_flag_resolves_and_hits(blocks[3][1], f"unix:{where}/serve.sock")
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0


def _the_vllm_flag_resolves_and_hits(block, store):
    pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")
    from types import SimpleNamespace
    from unittest.mock import Mock

    from vllm.config import ECTransferConfig, VllmConfig
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
    from vllm.distributed.ec_transfer.ec_connector.factory import ECConnectorFactory

    flag = json.loads(re.search(r"--ec-transfer-config '(.*)'", block, re.S).group(1))
    assert flag["ec_connector_extra_config"]["store"] == "unix:/var/cache/ec-store/serve.sock"
    flag["ec_connector_extra_config"]["store"] = store
    ec = ECTransferConfig(**flag)
    cls = ECConnectorFactory.get_connector_class(ec)
    assert cls.__name__ == "EcStoreConnector" and cls.__module__ == "ecstore.vllm"
    config = Mock(spec=VllmConfig)
    config.model_config = None
    config.ec_transfer_config = ec
    conn = cls(config, ECConnectorRole.SCHEDULER)
    try:
        import torch

        conn.cache.put(conn.namespace, "img-2", torch.randn(10, 64).to(torch.bfloat16))
        req = SimpleNamespace(request_id="r", mm_features=[SimpleNamespace(identifier="img-2", modality="image")],
                              get_num_encoder_embeds=lambda i: 10)
        deadline = time.monotonic() + 30
        while not conn.ensure_cache_available(req, 0):
            assert time.monotonic() < deadline
            time.sleep(0.002)
        assert conn.has_cache_item("img-2")
        conn.request_finished(req)
    finally:
        conn.shutdown()


def test_the_cli_pages_examples_run_as_written(tmp_path):
    """docs/cli.md's example session, each `$` line run in order in a fresh directory (its
    /tmp paths moved under it), every one succeeding, and the lines the page shows output for
    printing it."""
    torch = pytest.importorskip("torch", reason="the example's safetensors file is torch's")
    from safetensors.torch import save_file

    page = open(os.path.join(os.path.dirname(README), "docs", "cli.md"), encoding="utf-8").read()
    block = re.findall(r"```sh\n(\$ ec-store put .*?)```", page, re.S)[0]
    lines = block.splitlines()
    src = tmp_path / "ec_cache" / "3f2a9c"
    src.mkdir(parents=True)
    save_file({"ec_cache": torch.zeros(400, 3584, dtype=torch.bfloat16)},
              str(src / "encoder_cache.safetensors"))
    (tmp_path / "emb.bin").write_bytes(bytes(324 * 16384 * 2))
    env = dict(os.environ, PATH=os.path.dirname(_ec_store_bin()) + os.pathsep + os.environ["PATH"])
    ran = 0
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        command = line[2:].replace("/tmp/", f"{tmp_path}/")
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        shown = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("$") else ""
        if shown.startswith("stored"):
            assert done.stdout.startswith(shown.split(" (")[0]), (line, done.stdout)
        if shown.startswith("{"):
            got = json.loads(done.stdout)
            for field in ("tier", "bytes", "dtype", "shape"):
                assert got[field] == json.loads(shown.replace(", ...", ""))[field], (field, got)
        ran += 1
    assert ran == 13


def test_the_operations_pages_daemon_block_runs_as_written(tmp_path):
    """docs/operations.md's daemon and operator-port block: the daemon with every flag shown,
    then each curl line, answered as the page says."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    page = open(os.path.join(os.path.dirname(README), "docs", "operations.md"),
                encoding="utf-8").read()
    block = re.findall(r"```sh\n(\$ ec-store serve .*?)```", page, re.S)[0]
    port, metrics = free_port(), free_port()
    (tmp_path / "token").write_text("s3cret\n")
    text = (block.replace("/var/cache/ec-store", str(tmp_path / "ec"))
            .replace("10.0.0.5:7070", f"127.0.0.1:{port}")
            .replace("/etc/ec.token", str(tmp_path / "token"))
            .replace("9464", str(metrics)))
    commands = []
    for entry in re.split(r"^\$ ", text, flags=re.M)[1:]:
        lines = entry.splitlines()
        n = 1
        while lines[n - 1].rstrip().endswith("\\"):  # a command's continuation lines
            n += 1
        commands.append(" ".join(l.rstrip().rstrip("\\") for l in lines[:n]).split("#")[0])
    serve = commands[0].strip().rstrip("&").strip()
    env = dict(os.environ, PATH=os.path.dirname(_ec_store_bin()) + os.pathsep + os.environ["PATH"])
    daemon = subprocess.Popen(["bash", "-c", "exec " + serve], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert "port" in daemon.stdout.readline()
        subprocess.run([_ec_store_bin(), "--server", f"127.0.0.1:{port}", "--token-file",
                        str(tmp_path / "token"), "stats"], check=True, capture_output=True)
        said = [subprocess.run(["bash", "-c", c], capture_output=True, text=True, check=True,
                               env=env).stdout for c in commands[1:]]
        assert "\necstore_requests_total{op=\"stats\"" in said[0], said[0]
        assert said[1:] == ["ok\n", "ok\n"], said
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0


DOCS = [README] + sorted(
    os.path.join(os.path.dirname(README), "docs", f)
    for f in os.listdir(os.path.join(os.path.dirname(README), "docs")) if f.endswith(".md"))


def documented_commands():
    """(page, line) of every `ec-store` command in the pages' sh blocks, continuation lines
    joined, a trailing `&`, comment or pipe left off, with the environment the line sets;
    lines with a placeholder (<...>) or a shell substitution are the reader's to fill, and
    are left out."""
    out = []
    for page in DOCS:
        for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", open(page).read(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^\s*(\$\s+)?(sudo\s+(-u\s+\S+\s+)?)?", "", line)
                env = dict(re.findall(r"([A-Z_]+)=(\S+)\s+", re.match(r"([A-Z_]+=\S+\s+)*",
                                                                    line).group(0)))
                line = re.sub(r"^([A-Z_]+=\S+\s+)*", "", line)
                if not line.startswith("ec-store "):
                    continue
                line = re.split(r"\s(\||&&|;|#|>|2>)\s?", line)[0].rstrip(" &")
                if re.search(r"<[^>]*>|\.\.\.|\$\(|`|\$\{|\[", line):
                    continue
                out.append((os.path.basename(page), env, line))
    return out


def test_every_documented_command_line_parses(tmp_path):
    """Each command the pages show is one the CLI takes: its command, flags and values, as
    pasted (--dry-run checks them, the files a daemon loads at start included, and runs
    nothing). The reader's own secrets, ACL and TLS pair stand in as files of this test's
    (its token, one ACL line, a CA and server pair); another file a command names is made
    empty."""
    import shlex

    from conftest import make_pki

    binary = _ec_store_bin()
    commands = documented_commands()
    assert len(commands) > 30, commands
    pki = make_pki(tmp_path / "stand-in-pki")
    (tmp_path / "stand-in-token").write_text("s3cret\n")
    (tmp_path / "stand-in-acl").write_text("ops cert=ops ns=* rights=admin\n")
    stand_in = {"--token-file": tmp_path / "stand-in-token",
                "--metrics-token-file": tmp_path / "stand-in-token",
                "--etcd-password-file": tmp_path / "stand-in-token",
                "--acl-file": tmp_path / "stand-in-acl", "--tls-cert": pki / "server.crt",
                "--tls-key": pki / "server.key", "--tls-ca": pki / "ca.crt"}
    failed, made = [], []
    for page, env, line in commands:
        argv = shlex.split(line)[1:]
        for i, a in enumerate(argv):
            flag = a.split("=", 1)[0]
            if flag in stand_in and "=" in a:
                argv[i] = f"{flag}={stand_in[flag]}"
            elif i > 0 and argv[i - 1] in stand_in:
                argv[i] = str(stand_in[argv[i - 1]])
        for _ in range(4):  # a file the reader would have: made, and tried again
            r = subprocess.run([binary, "--dry-run", *argv], cwd=tmp_path, capture_output=True,
                               text=True, env={**os.environ, "EC_STORE_TOKEN": "", **env})
            missing = re.search(r"File does not exist: ([^;\s]+)", r.stderr)
            if r.returncode == 0 or not missing or missing.group(1).startswith("/") and \
                    not missing.group(1).startswith("/tmp/"):
                break
            path = tmp_path / missing.group(1)  # an absolute one under /tmp stays where it is
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
            made.append(path)
        if r.returncode != 0:
            failed.append(f"{page}: {line}\n    {r.stderr.strip()}")
    for path in made:
        path.unlink(missing_ok=True)
    assert not failed, "\n".join(failed)
