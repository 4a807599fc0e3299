"""A deploy's mechanism is in place while the serving config has every setting it set, read from the config
the stack serves now (what a rollback or a setting change replaces), not from what the fault recorded."""
from __future__ import annotations

import random
from pathlib import Path

from faults import FaultContext, build
from services.stack.deploy_config import DeployConfig
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

REPO = Path(__file__).resolve().parents[2]
SHIPPED = DeployConfig.load(REPO / "services" / "serve_config.yaml")


def _serving(tmp_path: Path, assignments: list[str], version: str) -> FaultContext:
    path = tmp_path / f"serve_config.{version}.yaml"
    SHIPPED.with_overrides(assignments, version).save(path)
    return FaultContext(SandboxConfig(home=tmp_path), StackState("run", str(tmp_path), deployed_config=str(path)),
                        random.Random(0))


def test_a_deploy_is_in_place_while_the_serving_version_has_its_settings(tmp_path):
    fault = build({"type": "deploy", "set": {"engine.enable_prefix_caching": False}})
    ctx = _serving(tmp_path, ["engine.enable_prefix_caching=false"], "v3")
    assert fault.in_place(ctx) == "the serving version v3 runs engine.enable_prefix_caching=false"
    assert fault.in_place(_serving(tmp_path, ["engine.enable_prefix_caching=true"], "v4")) is None
    assert fault.in_place(_serving(tmp_path, [], "v1")) is None


def test_a_deploy_of_several_settings_is_gone_once_one_of_them_is_back(tmp_path):
    fault = build({"type": "deploy", "set": {"engine.quantization": "int4",
                                             "engine.quantization_granularity": "per-module"}})
    both = ["engine.quantization=int4", "engine.quantization_granularity=per-module"]
    assert fault.in_place(_serving(tmp_path, both, "v2")).startswith("the serving version v2 runs")
    assert fault.in_place(_serving(tmp_path, both[:1], "v3")) is None


def test_a_deploy_of_an_environment_variable_is_in_place_while_the_serving_version_sets_it(tmp_path):
    fault = build({"type": "deploy", "set": {"env.OMP_WAIT_POLICY": "ACTIVE"}})
    assert fault.assignments() == ['env.OMP_WAIT_POLICY="ACTIVE"']
    assert fault.in_place(_serving(tmp_path, ["env.OMP_WAIT_POLICY=ACTIVE"], "v2")) \
        == 'the serving version v2 runs env.OMP_WAIT_POLICY="ACTIVE"'
    assert fault.in_place(_serving(tmp_path, [], "v1")) is None  # unset reads None, what the revert puts back
