"""What the candidate can reach on loopback cannot steer the stack: Prometheus' lifecycle endpoints are off, and
Ray's GCS and dashboard (Serve's REST API, the job and state APIs) refuse a caller without the sandbox's token."""
import stat
from pathlib import Path

import pytest

from services.stack.control_probe import (
    DASHBOARD_PATHS,
    PROMETHEUS_REFUSALS,
    dashboard_status,
    gcs_caller,
    prometheus_status,
)
from services.stack.serve_control import ServeControl

pytestmark = pytest.mark.stack


def test_prometheus_runs_without_its_admin_and_lifecycle_apis_and_keeps_serving(stack):
    # tests/stack/test_tsdb_copy.py checks each endpoint's refusal on the same flags
    for path, refused in PROMETHEUS_REFUSALS:
        assert prometheus_status(stack.state.prometheus_url, path) == refused
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


@pytest.mark.parametrize("path", DASHBOARD_PATHS)
def test_the_dashboard_refuses_a_caller_without_the_token(stack, path):
    assert dashboard_status(stack.state.dashboard_url, path) == 401
    assert dashboard_status(stack.state.dashboard_url, path, token="0" * 64) == 403
    ctl = ServeControl(stack.state.dashboard_url, token_file=stack.refresh().ray_token_file)
    try:
        assert ctl.application(stack.state.app_name)["status"] == "RUNNING"  # the sandbox's own calls get in
    finally:
        ctl.close()


def test_serves_rest_api_refuses_a_deploy_without_the_token(stack):
    assert dashboard_status(stack.state.dashboard_url, "/api/serve/applications/", method="PUT",
                            json={"applications": []}) == 401
    assert stack.prom.ready() and ServeControl(stack.state.dashboard_url, token_file=stack.refresh().ray_token_file) \
        .application(stack.state.app_name)["status"] == "RUNNING"  # nothing was deleted


def test_the_gcs_refuses_a_caller_without_the_token_or_with_a_wrong_one(stack, tmp_path):
    verdict, why = gcs_caller(stack.state.ray_address, tmp_path)
    assert verdict == "refused" and why.startswith("AuthenticationError"), why
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    verdict, why = gcs_caller(stack.state.ray_address, tmp_path, token_file=wrong)
    assert verdict == "refused" and why.startswith("AuthenticationError"), why
    assert gcs_caller(stack.state.ray_address, tmp_path, token_file=stack.refresh().ray_token_file) == ("nodes", "1")
