"""`sandbox grafana push`: through the real grafana-client, against a stand-in that checks every request
against Grafana's documented HTTP API (tests/dashboards/grafana_api.py); and its error exits."""
import json
import os
import socket
import subprocess
import sys

import pytest
from grafana_api import FakeGrafana

from sandbox.grafana.push import DATASOURCE_UID, FOLDER_UID, board_files

PROMETHEUS = "http://127.0.0.1:9090"
BOARD_UIDS = sorted(json.loads(p.read_text())["uid"] for p in board_files())


def cli(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_GRAFANA_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "sandbox.cli", "grafana", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def push(fake, *extra):
    return cli("push", "--url", fake.url, "--prometheus-url", PROMETHEUS, "--json", *extra)


def test_push_uploads_the_datasource_a_folder_and_every_dashboard_as_documented():
    with FakeGrafana(token="sa-token") as fake:
        result = push(fake, "--token", "sa-token")
    assert result.returncode == 0, result.stderr
    assert fake.violations == []
    report = json.loads(result.stdout)
    assert report["datasource"] == "created" and report["folder"] == "created"
    assert sorted(d["uid"] for d in report["dashboards"]) == BOARD_UIDS == sorted(fake.dashboards)
    ds = fake.datasources[DATASOURCE_UID]
    assert (ds["type"], ds["url"], ds["access"], ds["isDefault"]) == ("prometheus", PROMETHEUS, "proxy", True)
    assert all(d["folderUid"] == FOLDER_UID and d["version"] == 1 for d in fake.dashboards.values())
    for p in board_files():  # uploaded as committed, only `id` cleared for Grafana to assign
        board = json.loads(p.read_text())
        assert fake.dashboards[board["uid"]]["dashboard"] == {**board, "id": None}
    paths = [(m, p) for m, p, _ in fake.requests]
    assert paths[:5] == [("GET", "/api/health"), ("GET", f"/api/datasources/uid/{DATASOURCE_UID}"),
                         ("POST", "/api/datasources"), ("GET", f"/api/folders/{FOLDER_UID}"), ("POST", "/api/folders")]
    assert paths[5:] == [("POST", "/api/dashboards/db")] * len(BOARD_UIDS)


def test_a_second_push_updates_everything_in_place():
    with FakeGrafana(token="sa-token") as fake:
        assert push(fake, "--token", "sa-token").returncode == 0
        result = push(fake, "--token", "sa-token")
    assert result.returncode == 0, result.stderr
    assert fake.violations == []
    report = json.loads(result.stdout)
    assert (report["datasource"], report["folder"]) == ("updated", "exists")
    assert len(fake.datasources) == 1 and len(fake.folders) == 1 and sorted(fake.dashboards) == BOARD_UIDS
    assert {d["version"] for d in report["dashboards"]} == {2}


def test_a_datasource_grafana_provisioned_is_kept_as_it_is():
    with FakeGrafana(token="sa-token") as fake:
        fake.datasources[DATASOURCE_UID] = {"id": 1, "uid": DATASOURCE_UID, "name": "Prometheus", "type": "prometheus",
                                            "access": "proxy", "url": "http://prometheus:9090", "readOnly": True}
        result = push(fake, "--token", "sa-token")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["datasource"] == "kept (provisioned)"
    assert fake.datasources[DATASOURCE_UID]["url"] == "http://prometheus:9090"
    assert not [r for r in fake.requests if r[0] == "PUT"] and fake.violations == []


def test_basic_auth_from_the_environment_works_too():
    with FakeGrafana(token=None, user="admin", password="s3cret") as fake:
        result = cli("push", "--prometheus-url", PROMETHEUS, "--json", env_extra={
            "SANDBOX_GRAFANA_URL": fake.url, "SANDBOX_GRAFANA_USER": "admin", "SANDBOX_GRAFANA_PASSWORD": "s3cret"})
    assert result.returncode == 0, result.stderr
    assert sorted(fake.dashboards) == BOARD_UIDS and fake.violations == []


def test_a_refused_token_exits_1_with_the_status_and_grafanas_message():
    with FakeGrafana(token="sa-token") as fake:
        result = push(fake, "--token", "wrong")
    assert result.returncode == 1
    assert "HTTP 401" in result.stderr and "Unauthorized" in result.stderr and fake.url in result.stderr
    assert not fake.dashboards and not fake.datasources  # refused at the first authenticated call


def test_an_unreachable_grafana_exits_1_naming_the_url():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    result = cli("push", "--url", url, "--token", "t")
    assert result.returncode == 1
    assert f"Grafana at {url} is unreachable" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    ((), "no Grafana named"),
    (("--url", "ftp://grafana:3000"), "must be http:// or https://"),
    (("--url", "http://admin:admin@grafana:3000"), "not in the URL"),
    (("--url", "http://127.0.0.1:3000", "--token", "t", "--user", "u", "--password", "p"), "not both"),
    (("--url", "http://127.0.0.1:3000", "--user", "u"), "needs a password"),
])
def test_bad_options_exit_2_before_anything_is_sent(args, message):
    result = cli("push", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
