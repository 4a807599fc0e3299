"""Ray Serve's REST API on the Ray dashboard (what `serve deploy` / `serve status` use)."""
from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from services.stack import ray_token


class DeployError(RuntimeError):
    """Serve rejected a config, or an application did not become healthy in time."""


class ServeControl:
    def __init__(self, dashboard_url: str, timeout_s: float = 30.0, token_file: str | None = None):
        """token_file: the cluster's Ray token (services/stack/ray_token.py); None for a cluster without one."""
        self.url = dashboard_url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s, headers=ray_token.headers(token_file))

    def close(self) -> None:
        self._http.close()

    def wait_dashboard(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._http.get(f"{self.url}/api/serve/applications/").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise DeployError(f"Ray dashboard at {self.url} did not answer within {timeout_s:.0f}s")
            time.sleep(0.2)

    def deploy(self, config: dict) -> None:
        """PUT the whole Serve config; Serve diffs it against what runs (rolling update, or reconfigure)."""
        resp = self._http.put(f"{self.url}/api/serve/applications/", json=config)
        if resp.status_code != 200:
            raise DeployError(f"Serve rejected the config ({resp.status_code}): {resp.text.strip()[:2000]}")

    def delete_all(self) -> None:
        self._http.delete(f"{self.url}/api/serve/applications/")

    def details(self) -> dict:
        resp = self._http.get(f"{self.url}/api/serve/applications/")
        resp.raise_for_status()
        return resp.json()

    def application(self, name: str) -> dict | None:
        return (self.details().get("applications") or {}).get(name)

    def replicas(self, app: str, deployment: str) -> list[dict]:
        """[{replica_id, state, pid, ...}] of one deployment."""
        detail = self.application(app) or {}
        return (detail.get("deployments") or {}).get(deployment, {}).get("replicas") or []

    def wait_running(self, app: str, timeout_s: float, settled: Callable[[dict], bool] | None = None,
                     on_poll: Callable[[dict | None], None] | None = None) -> dict:
        """Until `app` is RUNNING with every deployment HEALTHY (and `settled(app_detail)`, if given)."""
        deadline = time.monotonic() + timeout_s
        detail = None
        while time.monotonic() < deadline:
            detail = self.application(app)
            if on_poll:
                on_poll(detail)
            if detail is not None:
                status = detail.get("status")
                if status == "DEPLOY_FAILED":
                    raise DeployError(f"application {app!r} failed to deploy: {detail.get('message', '')[:3000]}")
                deployments = (detail.get("deployments") or {}).values()
                healthy = deployments and all(d.get("status") == "HEALTHY" for d in deployments)
                if status == "RUNNING" and healthy and (settled is None or settled(detail)):
                    return detail
            time.sleep(0.5)
        message = (detail or {}).get("message", "") if detail else "not deployed"
        raise DeployError(f"application {app!r} not running after {timeout_s:.0f}s: {message[:3000]}")


def running_replicas(detail: dict, deployment: str) -> list[dict]:
    return [r for r in (detail.get("deployments") or {}).get(deployment, {}).get("replicas") or []
            if r.get("state") == "RUNNING"]
