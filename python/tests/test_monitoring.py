"""deploy/monitoring/ against the real tools: promtool checks and unit-tests the alert rules,
and a real Prometheus scrapes a cluster member started here, so that every recording rule and
every dashboard panel's query is shown to return data from the series the daemon exports."""
import json
import pathlib
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

import ecstore
from conftest import start_serve
from test_cluster import Etcd, _port

MONITORING = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "ec-store.rules.yml"

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None or shutil.which("prometheus") is None,
    reason="Prometheus is not installed (scripts/install-deps.sh installs Debian's prometheus)")


def test_promtool_checks_the_rules_and_each_alert_fires_on_its_fault_only():
    subprocess.run(["promtool", "check", "rules", str(RULES)], check=True, capture_output=True)
    r = subprocess.run(["promtool", "test", "rules", "ec-store.rules.test.yml"],
                       cwd=MONITORING, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "ec-store.rules.test.yml")
                            .read_text()))
    alerts = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    assert alerts and alerts <= tested, f"alerts without a unit test: {alerts - tested}"


def _query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _dashboard_queries():
    d = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for p in d["panels"]:
        for t in p["targets"]:
            yield p["title"], t["expr"].replace("$instance", ".*")


def test_every_rule_and_panel_returns_data_from_a_scraped_member(tmp_path):
    etcd = Etcd(tmp_path / "etcd")
    proc, line, port = start_serve(tmp_path / "node", "--cluster",
                                   f"etcd://127.0.0.1:{etcd.client}/mon", "--node-id", "node-a",
                                   "--cluster-ttl", "2s", "--metrics-listen", "127.0.0.1:0",
                                   pool_size="16MiB", stderr=subprocess.DEVNULL)
    metrics = int(re.search(r"metrics port (\d+)", line).group(1))
    web = _port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: ec-store\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics}']}}]\n")
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = ecstore.connect(f"tcp://127.0.0.1:{port}", timeout=5.0)
        value = np.arange(64 * 1024, dtype=np.uint8)
        # Traffic through every tier while Prometheus scrapes: puts past the pool's size
        # spill to disk, gets hit the pool and the disk, and some miss.
        deadline = time.monotonic() + 60
        pending = {q for q in _dashboard_queries() if "vllm:" not in q[1]}
        pending |= {("rule", r) for r in re.findall(r"- record: (\S+)", RULES.read_text())}
        i = 0
        while pending and time.monotonic() < deadline:
            for k in range(20):
                try:
                    c.put("n", f"k{i}-{k}", value, dtype="U8", shape=[value.size])
                except ecstore.errors.EcStoreError:
                    pass  # admitted once the member's own view holds it
            for k in range(0, i * 20, 7):
                key = f"k{k // 20}-{k % 20}"
                if c.contains("n", key):
                    c.get("n", key, like="numpy")
            c.contains("n", "never-put")
            i += 1
            time.sleep(0.5)
            pending = {(title, expr) for title, expr in pending if not _query(web, expr)}
        assert not pending, f"queries that returned no data: {sorted(pending)}"
        alerts = _query(web, 'ALERTS{alertstate="firing"}')
        assert not alerts, f"alerts firing on a healthy member: {alerts}"
        c.close()
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait(timeout=30)
        proc.kill()
        proc.wait()
        etcd.proc.kill()
        etcd.proc.wait()


def test_the_dashboard_reads_only_series_the_daemon_or_the_connector_exports():
    exported = set(re.findall(r'"(ecstore_[a-z_]+)"', (MONITORING.parents[1] / "ops" /
                                                      "prometheus.cc").read_text()))
    recorded = set(re.findall(r"- record: (\S+)", RULES.read_text()))
    for title, expr in _dashboard_queries():
        for name in re.findall(r"\b(ecstore[:_][a-z0-9_:]+)", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert base in exported or name in recorded, f"{title}: {name} is not exported"
