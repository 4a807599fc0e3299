"""Upload the sandbox's datasource and dashboards to a running Grafana (its legacy HTTP API, /api/*).

The same objects the compose deployment provisions from files: the Prometheus datasource (uid
`prometheus`, the uid every panel's `${datasource}` variable defaults to), a folder, and the four
dashboards of dashboards/grafana/*.json. Re-running a push updates them in place (same uids). A
datasource Grafana provisioned from a file is read-only through the API; it is kept as it is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.grafana.target import GrafanaError, GrafanaTarget, call
from services.stack.settings import REPO_ROOT

BOARDS_DIR = REPO_ROOT / "dashboards" / "grafana"
DATASOURCE_UID = "prometheus"
DATASOURCE_NAME = "Prometheus"
FOLDER_UID = "sandbox-llm-serving"
FOLDER_TITLE = "LLM serving"  # as dashboards/provisioning/dashboards/sandbox.yaml names it


def board_files(boards_dir: Path = BOARDS_DIR) -> list[Path]:
    return sorted(Path(boards_dir).glob("*.json"))


def datasource_body(prometheus_url: str) -> dict:
    return {"uid": DATASOURCE_UID, "name": DATASOURCE_NAME, "type": "prometheus", "access": "proxy",
            "url": prometheus_url, "isDefault": True, "basicAuth": False,
            "jsonData": {"timeInterval": "1s", "httpMethod": "POST"}}


@dataclass
class PushReport:
    url: str
    datasource: str = ""  # created | updated | kept (provisioned)
    folder: str = ""  # created | exists
    dashboards: list[dict] = field(default_factory=list)  # {uid, title, url, version}

    def to_dict(self) -> dict:
        return {"url": self.url, "datasource": self.datasource, "folder": self.folder,
                "dashboards": self.dashboards}


def push(target: GrafanaTarget, prometheus_url: str, boards_dir: Path = BOARDS_DIR) -> PushReport:
    """Datasource, folder, dashboards; raises GrafanaError at the first refusal (nothing is rolled back:
    every step is an idempotent upsert, so running it again completes it)."""
    boards = [json.loads(p.read_text()) for p in board_files(boards_dir)]
    if not boards:
        raise ValueError(f"no dashboards in {boards_dir}: run python dashboards/build.py")
    api = target.api()
    report = PushReport(target.url)
    call(target, "answer its health check", api.health.check)
    report.datasource = _upsert_datasource(target, api, prometheus_url)
    report.folder = _ensure_folder(target, api)
    for board in boards:
        payload = {"dashboard": {**board, "id": None}, "folderUid": FOLDER_UID, "overwrite": True,
                   "message": "sandbox grafana push"}
        saved = call(target, f"save dashboard {board['uid']!r}", api.dashboard.update_dashboard, payload)
        report.dashboards.append({"uid": saved.get("uid", board["uid"]), "title": board["title"],
                                  "url": saved.get("url"), "version": saved.get("version")})
    return report


def _upsert_datasource(target: GrafanaTarget, api, prometheus_url: str) -> str:
    body = datasource_body(prometheus_url)
    try:
        existing = call(target, "look up the datasource", api.datasource.get_datasource_by_uid, DATASOURCE_UID)
    except GrafanaError as e:
        if e.status != 404:
            raise
        call(target, "create the datasource", api.datasource.create_datasource, body)
        return "created"
    if existing.get("readOnly"):
        return "kept (provisioned)"
    call(target, "update the datasource", api.datasource.update_datasource_by_uid, DATASOURCE_UID, body)
    return "updated"


def _ensure_folder(target: GrafanaTarget, api) -> str:
    try:
        call(target, "look up the folder", api.folder.get_folder, FOLDER_UID)
        return "exists"
    except GrafanaError as e:
        if e.status != 404:
            raise
    call(target, "create the folder", api.folder.create_folder, FOLDER_TITLE, uid=FOLDER_UID)
    return "created"
