"""deploy/kubernetes/ rendered by kubectl's kustomize and loaded strictly into the official
Kubernetes client's models (scripts/check_manifests.py), a broken copy refused the same way,
and the DaemonSet's command line parsed by the ec-store it would run, its probes and ports
matching the flags it passes."""
import json
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import _ec_store_bin

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="kubectl is not installed (it renders the kustomization)")


def _rendered():
    return subprocess.run(["kubectl", "kustomize", str(KUSTOMIZE)], check=True,
                          capture_output=True, text=True).stdout


def _check(stream):
    venv = subprocess.run([str(ROOT / "scripts" / "tools-env.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    return subprocess.run([f"{venv}/bin/python", str(ROOT / "scripts" / "check_manifests.py")],
                          input=stream, capture_output=True, text=True)


def _objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(_rendered()) if o}


def test_every_object_loads_into_the_clients_models_and_a_broken_one_does_not():
    ok = _check(_rendered())
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "DaemonSet/ec-store: loads into V1DaemonSet" in ok.stdout
    broken = _rendered().replace("containerPort: 7070", 'containerPort: "7070"').replace(
        "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true")
    bad = _check(broken)
    assert bad.returncode == 1
    assert "containerPort: int expected, got '7070'" in bad.stdout
    assert "readOnlyRootFileSystem: V1SecurityContext has no such field" in bad.stdout


def _daemon():
    ds = _objects()[("DaemonSet", "ec-store")]
    return ds, ds["spec"]["template"]["spec"]["containers"][0]


def test_the_daemonsets_command_line_parses_with_the_files_it_mounts(tmp_path):
    _, c = _daemon()
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "acl").write_text((KUSTOMIZE / "acl").read_text())
    args = []
    for a in c["args"]:
        a = a.replace("$(NODE_NAME)", "gpu-node-1").replace("$(HOST_IP)", "10.0.0.5")
        a = a.replace("/etc/ec-store/token/token", str(tmp_path / "token"))
        a = a.replace("/etc/ec-store/acl/acl", str(tmp_path / "acl"))
        a = a.replace("/var/cache/ec-store", str(tmp_path / "store"))
        args.append(a)
    assert not [a for a in args if "$(" in a], "an env variable the test does not stand in for"
    r = subprocess.run([_ec_store_bin(), "--dry-run", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_probes_ports_and_the_monitor_match_the_flags():
    ds, c = _daemon()
    flags = dict(a.split("=", 1) for a in c["args"] if a.startswith("--") and "=" in a)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == int(flags["--metrics-listen"].rsplit(":", 1)[1])
    assert ports["store"] == int(flags["--listen"].rsplit(":", 1)[1])
    assert flags["--advertise"].endswith(f":{c['ports'][0]['hostPort']}")
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert flags["--dir"] == mounts["store"]
    assert flags["--token-file"].startswith(mounts["token"] + "/")
    assert flags["--acl-file"].startswith(mounts["acl"] + "/")
    pm = _objects()[("PodMonitor", "ec-store")]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in ports
    assert pm["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert labels["app.kubernetes.io/name"] == "ec-store"  # the job the alert rules expect
    # The engine reaches its node's daemon through the socket in the shared directory.
    vllm = _objects()[("Deployment", "vllm-qwen2-vl")]["spec"]["template"]["spec"]
    config = json.loads(vllm["containers"][0]["args"][2])
    store = config["ec_connector_extra_config"]["store"]
    assert store == f"unix:{flags['--dir']}/serve.sock"
    host = {v["name"]: v["hostPath"]["path"] for v in vllm["volumes"] if "hostPath" in v}
    assert host["store"] == flags["--dir"]
    uid = vllm["securityContext"]["runAsUser"]
    assert re.search(rf"uid={uid}\b", (KUSTOMIZE / "acl").read_text())
