"""What a caller without the sandbox's token gets from the control plane: the probes the control-plane tests and
the compose live check (bench/compose_live.py) make, from a process of their own.

    dashboard_status(url, "/api/jobs/")                      # 401 without a token
    dashboard_status(url, "/api/jobs/", token="0" * 64)      # 403 with a wrong one
    gcs_caller(address, home)                                # ('refused', 'AuthenticationError ...')
    gcs_caller(address, home, token_file=path)               # ('nodes', '2')
    prometheus_status(url, "/-/quit")                        # 403: the lifecycle API is off
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

DASHBOARD_PATHS = ("/api/serve/applications/", "/api/jobs/", "/api/v0/nodes", "/api/v0/actors")
# Prometheus' endpoints that change or stop it, and what it answers when their API is off
PROMETHEUS_REFUSALS = (("/-/quit", 403), ("/api/v1/admin/tsdb/delete_series?match[]=up", 500))

# A process of its own asks the GCS for the cluster's nodes: what `ray.init` and every Ray tool ask first.
_GCS_CALLER = """
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


def dashboard_status(dashboard_url: str, path: str, token: str | None = None, method: str = "GET",
                     json: dict | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.request(method, dashboard_url + path, headers=headers, json=json, timeout=10).status_code


def prometheus_status(prometheus_url: str, path: str) -> int:
    return httpx.post(prometheus_url + path, timeout=10).status_code


def gcs_caller(address: str, home: Path, token_file: str | Path | None = None) -> tuple[str, str]:
    """('nodes', count) or ('refused', why): the GCS asked by a fresh process whose only token is `token_file`
    (none: no RAY_AUTH_* at all, and a HOME without ~/.ray/auth_token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env |= {"HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    if token_file is not None:
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    out = subprocess.run([sys.executable, "-c", _GCS_CALLER, address], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    words = out.stdout.strip().split(None, 1)
    if not words:
        return "failed", f"exit {out.returncode}: {out.stderr[-2000:]}"
    return words[0], words[1] if len(words) > 1 else ""
