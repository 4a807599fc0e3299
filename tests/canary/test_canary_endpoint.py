"""The canary's metrics endpoint, its target file, its lint, and the process: `python -m sandbox.canary`."""
import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client import generate_latest

from sandbox.canary import process
from sandbox.canary.endpoint import MetricsEndpoint, target_file
from sandbox.canary.metrics import CanaryMetrics
from services.model.tasks import TASKS, eval_set
from services.serve import metric_names as names
from services.stack.settings import REPO_ROOT

ANSWERS = {e.prompt: e.answer for t in TASKS for e in eval_set(t)}
promtool = shutil.which("promtool")


class _Completions(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        out = json.dumps({"choices": [{"text": ANSWERS.get(body["prompt"], "")}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("x-served-by", "replica-a")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_canary_metrics_are_declared_under_sandbox_canary():
    assert [s.query_name for s in names.CANARY_METRICS] == [
        "sandbox_canary_checks_total", "sandbox_canary_consistency_checks_total", "sandbox_canary_requests_total"]
    assert names.CANARY_CHECKS.extra_labels == ("task", "length", "result")
    assert names.CANARY_CONSISTENCY.extra_labels == ("mode", "load", "replica", "result")
    assert all(":" not in s.record_name for s in names.CANARY_METRICS)


def test_no_canary_name_or_label_hints_at_a_cause():
    words = ("fault", "slow", "throttl", "bug", "inject", "incident", "leak", "quantiz", "batch", "seed")
    texts = [s.query_name for s in names.CANARY_METRICS] + [lbl for s in names.CANARY_METRICS for lbl in s.extra_labels]
    assert not [t for t in texts if any(w in t for w in words)]


@pytest.mark.skipif(promtool is None, reason="promtool not installed (scripts/setup.sh installs it)")
def test_the_canary_endpoint_passes_promtool_lint():
    metrics = CanaryMetrics()
    metrics.request("accuracy", "200")
    metrics.request("consistency", "503")
    metrics.checked("copy", "long", False)
    metrics.compared("greedy", "burst", "abc123", "mismatch")
    result = subprocess.run([promtool, "check", "metrics"], input=generate_latest(metrics.registry),
                            capture_output=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        (result.stdout + result.stderr).decode()


def test_the_endpoint_announces_itself_while_open(tmp_path):
    metrics = CanaryMetrics()
    metrics.checked("add", "short", True)
    endpoint = MetricsEndpoint(metrics.registry, first_port=19470, targets_dir=tmp_path)
    try:
        announced = json.loads(target_file(tmp_path).read_text())
        assert announced == [{"targets": [f"127.0.0.1:{endpoint.port}"], "labels": {}}]
        text = httpx.get(endpoint.url, timeout=5).text
        assert 'sandbox_canary_checks_total{length="short",result="correct",task="add"} 1.0' in text
    finally:
        endpoint.close()
    assert not target_file(tmp_path).exists()


def test_the_cli_probes_for_its_duration_and_prints_a_summary(fake_api, tmp_path):
    result = subprocess.run([sys.executable, "-m", "sandbox.canary", "--api", fake_api, "--model", "m",
                             "--targets-dir", str(tmp_path), "--port", "19480", "--interval", "0.05",
                             "--duration", "2"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["references"] == 14 and summary["slots"] > 5 and summary["skipped"] == 0
    assert all(v["wrong"] == 0 for v in summary["accuracy"].values())
    assert summary["consistency_by_replica"]["replica-a"]["mismatch"] == 0
    assert not list(tmp_path.glob("*.json"))


def test_a_spawned_canary_is_announced_and_stops_on_sigterm(fake_api, tmp_path):
    proc = process.spawn(fake_api, "m", tmp_path, tmp_path / "canary.log", first_port=19490, interval_s=0.2)
    announced = target_file(tmp_path, proc.pid)
    try:
        assert announced.exists()
        port = json.loads(announced.read_text())[0]["targets"][0]
        assert "sandbox_canary_requests_total" in httpx.get(f"http://{port}/metrics", timeout=5).text
    finally:
        process.stop(proc)
    assert proc.returncode == 0, (tmp_path / "canary.log").read_text()
    assert not announced.exists()
    assert "references" in json.loads((tmp_path / "canary.log").read_text().splitlines()[-1])  # its summary


def test_sandbox_down_stops_a_running_canary(fake_api, tmp_path):
    from services.stack.settings import SandboxConfig
    from services.stack.stack import Stack
    from services.stack.state import StackState, pid_alive

    cfg = SandboxConfig(home=tmp_path / "home")
    state = StackState(run_id="r", run_dir=str(tmp_path / "run"))  # nothing else started: no Ray, no Prometheus
    state.save(cfg.state_file)
    proc = process.spawn(fake_api, "m", state.targets_dir, tmp_path / "canary.log", first_port=19500,
                         interval_s=0.2)
    try:
        result = Stack(cfg).down()
        assert result["stopped"] == [f"canary prober (pid {proc.pid})"]
        assert proc.wait(timeout=5) == 0 and not pid_alive(proc.pid)
        assert not list(state.targets_dir.glob("*.json")) and not cfg.state_file.exists()
    finally:
        if proc.poll() is None:
            process.stop(proc)


def test_a_canary_killed_after_its_grace_period_leaves_no_target_file(tmp_path):
    """A prober that does not stop on SIGTERM is killed; its target file would stay, a target Prometheus
    counts as down (a rollout waiting for every target to be scraped then waits in vain)."""
    ready = tmp_path / "ready"
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "open(sys.argv[1], 'w').write('ignoring SIGTERM')\n"
            "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)])
    announced = target_file(tmp_path, proc.pid)
    announced.write_text("[]")  # as the prober writes it, named after its pid
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.halt(proc, tmp_path, timeout_s=0.5)
    assert proc.returncode == -9 and not announced.exists()


LAUNCHER = """
import sys, time
from pathlib import Path
from sandbox.canary import process
proc = process.launch(sys.argv[1], "m", Path(sys.argv[2]), Path(sys.argv[2]) / "canary.log", "--port", "19510",
                      "--interval", "0.2")
print(proc.pid, flush=True)
time.sleep(120)
"""


def test_a_launched_canary_ends_with_the_drill_that_launched_it_even_when_killed_outright(fake_api, tmp_path):
    import os
    import signal

    from services.stack.state import pid_alive

    drill = subprocess.Popen([sys.executable, "-c", LAUNCHER, fake_api, str(tmp_path)], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, text=True)
    canary = int(drill.stdout.readline())
    announced = target_file(tmp_path, canary)
    deadline = time.monotonic() + 30
    while not announced.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert announced.exists(), (tmp_path / "canary.log").read_text()
    os.kill(drill.pid, signal.SIGKILL)  # no clean-up: the canary alone must notice
    drill.wait(timeout=10)
    deadline = time.monotonic() + 10
    while pid_alive(canary) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(canary) and not announced.exists()  # gone, and its target file with it
