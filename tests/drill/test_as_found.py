"""A drill on a stack that outlives it hands the stack back with the deployed config it found, where the
candidate's actions left it changed (an admission limit stays in the ingress otherwise, and the next drill's
traffic meets 429s)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from incidents.promql import PromtoolNotFound
from incidents.schema import load_catalogue
from sandbox.drill import runner
from sandbox.drill.runner import Drill
from services.stack.deploy_config import INGRESS, DeployConfig
from services.stack.settings import SandboxConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def drill(tmp_path, monkeypatch):
    try:
        incident = load_catalogue(REPO / "incidents")["quiet-shift"]
    except PromtoolNotFound as e:
        pytest.skip(str(e))
    deployed = tmp_path / "deployed.yaml"
    DeployConfig.load(REPO / "services" / "serve_config.yaml").save(deployed)
    state = SimpleNamespace(deployed_config=str(deployed))
    monkeypatch.setattr(runner.StackState, "load", staticmethod(lambda path: state))
    deploys = []
    monkeypatch.setattr(runner, "deploy_config", lambda cfg, now, new, timeout_s, **kw: deploys.append(new.data))
    d = Drill(SandboxConfig(home=tmp_path / "home", runs=tmp_path / "runs"), incident, "nothing", 7)
    d.ctx = SimpleNamespace(timeout_s=5.0)
    d.mitigation = SimpleNamespace(actions=[])
    return d, state, deployed, deploys


def test_an_admission_limit_left_by_the_candidate_is_lifted_by_deploying_the_config_the_drill_found(drill):
    d, state, deployed, deploys = drill
    put_back = d._as_found(state)
    found = DeployConfig.load(deployed).data
    shed = DeployConfig.load(deployed)
    shed.deployment(INGRESS)["user_config"] = {"max_inflight_requests": 64}
    shed.save(deployed)
    d.mitigation.actions = [{"action": "shed-load", "started": 1.0}]
    assert put_back() == [] and deploys == [found]


def test_nothing_is_deployed_where_the_candidate_did_not_act_or_the_config_is_as_found(drill):
    d, state, deployed, deploys = drill
    put_back = d._as_found(state)
    assert put_back() == []
    d.mitigation.actions = [{"action": "restart-replica", "started": 1.0, "replica": "r1"}]
    assert put_back() == [] and deploys == []
