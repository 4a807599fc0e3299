"""The Grafana dashboards: built from dashboards/build.py, structurally sound, answer-free, valid PromQL."""
import json
from pathlib import Path

import pytest

from dashboards import build
from incidents.promql import check_many

GRAFANA = Path(build.__file__).parent / "grafana"
BOARDS = sorted(GRAFANA.glob("*.json"))
VARIABLES = {"$model": ".*", "$replica": ".*", "$version": ".*"}


def exprs(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def concrete(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def test_the_committed_json_is_what_build_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "OUT", tmp_path)
    build.build()
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [p.name for p in BOARDS]
    for p in BOARDS:
        assert (tmp_path / p.name).read_text() == p.read_text(), f"{p.name}: run python dashboards/build.py"


@pytest.mark.parametrize("path", BOARDS, ids=[p.stem for p in BOARDS])
def test_a_dashboard_follows_grafanas_model(path):
    board = json.loads(path.read_text())
    for key in ("uid", "title", "panels", "templating", "schemaVersion", "time"):
        assert key in board, key
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "model", "replica", "version"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        pos = p["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"] and all(t["refId"] and t["expr"] for t in p["targets"]), p["title"]
            assert p["datasource"]["uid"] == "${datasource}"


def test_every_panel_expression_parses():
    all_exprs = [concrete(e) for p in BOARDS for e in exprs(json.loads(p.read_text()))]
    errors = {e: err for e, err in zip(all_exprs, check_many(all_exprs)) if err}
    assert not errors, errors


def test_no_panel_names_a_root_cause():
    from incidents import taxonomy

    words = {t.id.replace("-", " ") for t in taxonomy.ROOT_CAUSES} | {t.id for t in taxonomy.ROOT_CAUSES}
    for p in BOARDS:
        board = json.loads(p.read_text())
        text = " ".join([board["title"], board["description"]] + [x.get("title", "") + " " + x.get("description", "")
                                                                  for x in board["panels"]]).lower()
        assert not [w for w in words if w in text], p.name
