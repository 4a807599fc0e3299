"""What the candidate can reach on loopback cannot steer the stack: Prometheus' lifecycle endpoints are off, and
Ray's GCS and dashboard (Serve's REST API, the job and state APIs) refuse a caller without the sandbox's token."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from services.stack.serve_control import ServeControl

pytestmark = pytest.mark.stack

GCS_CALLER = """
import sys
from ray._private import ray_constants
ray_constants.ENABLE_RAY_CLUSTER = False  # a loopback head (faults/base.py: _stay_on_loopback)
from ray._raylet import GcsClient
try:
    nodes = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=10)
except Exception as e:
    print("refused", type(e).__name__, e)
    sys.exit(1)
print("nodes", len(nodes))
"""


def test_prometheus_runs_without_its_admin_and_lifecycle_apis_and_keeps_serving(stack):
    # tests/stack/test_tsdb_copy.py checks each endpoint's refusal on the same flags
    for path, refused in (("/-/quit", 403), ("/api/v1/admin/tsdb/delete_series?match[]=up", 500)):
        assert httpx.post(f"{stack.state.prometheus_url}{path}", timeout=10).status_code == refused
    assert stack.prom.ready() and stack.prom.value("count(up)") >= 1


def test_the_token_file_is_the_sandbox_users_alone(stack):
    token_file = Path(stack.refresh().ray_token_file)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) & 0o077 == 0
    token = token_file.read_text().strip()
    assert len(token) == 64
    # never written anywhere else the sandbox writes: its home (state, runs, logs) and Ray's session logs
    session = Path(stack.refresh().ray_session_dir or "/nonexistent")
    for root in (stack.cfg.home, session / "logs"):
        for path in root.rglob("*"):
            if path.is_file() and path != token_file and path.stat().st_size < 50_000_000:
                assert token.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("path", ["/api/serve/applications/", "/api/jobs/", "/api/v0/nodes", "/api/v0/actors"])
def test_the_dashboard_refuses_a_caller_without_the_token(stack, path):
    url = stack.state.dashboard_url + path
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer " + "0" * 64}, timeout=10).status_code == 403
    ctl = ServeControl(stack.state.dashboard_url, token_file=stack.refresh().ray_token_file)
    try:
        assert ctl.application(stack.state.app_name)["status"] == "RUNNING"  # the sandbox's own calls get in
    finally:
        ctl.close()


def test_serves_rest_api_refuses_a_deploy_without_the_token(stack):
    resp = httpx.put(stack.state.dashboard_url + "/api/serve/applications/", json={"applications": []}, timeout=10)
    assert resp.status_code == 401
    assert stack.prom.ready() and ServeControl(stack.state.dashboard_url, token_file=stack.refresh().ray_token_file) \
        .application(stack.state.app_name)["status"] == "RUNNING"  # nothing was deleted


def _gcs_caller(stack, tmp_path, **auth) -> subprocess.CompletedProcess:
    """A process of its own asks the GCS for the cluster's nodes (what `ray.init` and every Ray tool ask first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env |= {"HOME": str(tmp_path), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **auth}  # no ~/.ray/auth_token either
    return subprocess.run([sys.executable, "-c", GCS_CALLER, stack.state.ray_address], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_gcs_refuses_a_caller_without_the_token_or_with_a_wrong_one(stack, tmp_path):
    none = _gcs_caller(stack, tmp_path)
    assert none.returncode == 1 and "refused AuthenticationError" in none.stdout, none.stdout + none.stderr[-2000:]
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    guessed = _gcs_caller(stack, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(wrong))
    assert guessed.returncode == 1 and "refused AuthenticationError" in guessed.stdout
    right = _gcs_caller(stack, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=stack.refresh().ray_token_file)
    assert right.returncode == 0 and right.stdout.strip() == "nodes 1", right.stdout + right.stderr[-2000:]
