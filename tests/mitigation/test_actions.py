"""`sandbox mitigate` without a stack: the actions are the taxonomy's remediations, a rollback finds its
version in the deploy history, a setting change puts the shipped value back, and bad input is refused with
exit code 2 before anything is looked up. (Each action on a live stack: tests/serving/test_mitigate.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from incidents.taxonomy import REMEDIATIONS
from sandbox.mitigation import history, settings
from sandbox.mitigation.actions import Refused, check_options
from sandbox.mitigation.catalogue import ACTIONS
from services.stack.deploy_config import DeployConfig

REPO = Path(__file__).resolve().parents[2]
SHIPPED = DeployConfig.load(REPO / "services" / "serve_config.yaml")


def _history(run_dir: Path, *changes: tuple[str, list[str]]) -> Path:
    """A stack's run directory after `sandbox up` (v1) and one deploy per (version, assignments)."""
    config = SHIPPED.copy()
    config.save(run_dir / "serve_config.yaml")
    for n, (version, assignments) in enumerate(changes, start=1):
        config = config.with_overrides(assignments, version)
        config.save(run_dir / f"serve_config.{n}.{version}.yaml")
    return run_dir


def test_there_is_one_action_for_each_remediation_of_the_taxonomy():
    assert sorted(ACTIONS) == sorted(t.id for t in REMEDIATIONS)


def test_a_rollback_goes_to_the_version_that_served_before_the_current_one(tmp_path):
    run = _history(tmp_path, ("v2", ["engine.max_num_seqs=16"]), ("v3", ["engine.enable_prefix_caching=false"]))
    target = history.rollback_target(run, "v3")
    assert target.version == "v2" and target.args["engine"]["max_num_seqs"] == 16
    assert target.args["engine"]["enable_prefix_caching"] is True


def test_a_rollback_to_a_named_version_takes_that_versions_latest_config(tmp_path):
    run = _history(tmp_path, ("v2", ["engine.max_num_seqs=16"]), ("v3", []), ("v2", ["engine.max_num_seqs=8"]),
                   ("v4", ["engine.max_num_seqs=4"]))
    assert history.rollback_target(run, "v4", "v2").args["engine"]["max_num_seqs"] == 8
    assert history.rollback_target(run, "v4", "v1").args["engine"]["max_num_seqs"] == 32


def test_a_rollback_past_a_revert_goes_to_the_version_it_replaced(tmp_path):
    run = _history(tmp_path, ("v2", ["engine.max_num_seqs=16"]), ("v1", ["engine.max_num_seqs=32"]))
    assert history.rollback_target(run, "v1").version == "v2"


@pytest.mark.parametrize(("version", "message"), [
    ("v3", "v3 is the version serving now: name an earlier one (deployed before: v1, v2)"),
    ("v9", "no version 'v9' was deployed on this stack (deployed before: v1, v2)"),
])
def test_a_rollback_to_the_current_or_an_unknown_version_is_refused(tmp_path, version, message):
    run = _history(tmp_path, ("v2", ["engine.max_num_seqs=16"]), ("v3", ["engine.max_num_seqs=8"]))
    with pytest.raises(ValueError) as e:
        history.rollback_target(run, "v3", version)
    assert str(e.value) == message


def test_a_rollback_with_one_version_deployed_is_refused(tmp_path):
    with pytest.raises(ValueError) as e:
        history.rollback_target(_history(tmp_path), "v1")
    assert str(e.value) == "nothing to roll back to: v1 is the only version deployed on this stack"


def test_a_new_version_never_reuses_a_label_the_stack_has_deployed(tmp_path):
    run = _history(tmp_path, ("v2", ["engine.max_num_seqs=16"]), ("v3", []), ("v2", ["engine.max_num_seqs=8"]))
    assert history.fresh_version(run, "v2") == "v4"


def test_the_first_new_version_of_a_fresh_stack_is_v2(tmp_path):
    assert history.fresh_version(_history(tmp_path), "v1") == "v2"


def test_enabling_prefix_caching_puts_the_shipped_setting_back_as_a_new_version():
    deployed = SHIPPED.with_overrides(["engine.enable_prefix_caching=false"], "v2")
    new, assignments = settings.change("enable-prefix-caching", deployed, SHIPPED, "v3")
    assert assignments == ["engine.enable_prefix_caching=true"]
    assert new.version == "v3" and new.args["engine"]["enable_prefix_caching"] is True
    assert new.args["engine"]["max_num_seqs"] == deployed.args["engine"]["max_num_seqs"]


def test_a_setting_already_as_shipped_is_refused_as_nothing_to_change():
    with pytest.raises(ValueError) as e:
        settings.change("enable-prefix-caching", SHIPPED, SHIPPED, "v2")
    assert str(e.value) == ("enable-prefix-caching: nothing to change, the serving version already runs "
                            "engine.enable_prefix_caching=True")


def test_raising_the_prefill_budget_only_raises_it():
    cut = SHIPPED.with_overrides(["engine.max_num_batched_tokens=16"], "v2")
    assert settings.change("raise-prefill-budget", cut, SHIPPED, "v3")[1] == ["engine.max_num_batched_tokens=512"]
    big = SHIPPED.with_overrides(["engine.max_num_batched_tokens=1024"], "v2")
    with pytest.raises(ValueError) as e:
        settings.change("raise-prefill-budget", big, SHIPPED, "v3")
    assert str(e.value).startswith("raise-prefill-budget: engine.max_num_batched_tokens is 1024, past the known-good "
                                   "512; nothing to raise")


def test_a_setting_change_returns_to_the_drills_tuned_baseline_not_the_shipped_default():
    # oom-at-peak: the fleet is tuned to 0.75 and 16 sequences (its setup); the bad deploy raised them
    tuned = SHIPPED.with_overrides(["engine.gpu_memory_utilization=0.75", "engine.max_num_seqs=16"], "v2")
    bad = tuned.with_overrides(["engine.gpu_memory_utilization=0.85"], "v3")
    new, assignments = settings.change("lower-memory-utilization", bad, tuned, "v4")
    assert assignments == ["engine.gpu_memory_utilization=0.75"] and new.args["engine"]["max_num_seqs"] == 16
    wide = tuned.with_overrides(["engine.max_num_seqs=128"], "v3")
    assert settings.change("lower-max-num-seqs", wide, tuned, "v4")[1] == ["engine.max_num_seqs=16"]
    with pytest.raises(ValueError) as e:  # against the shipped 0.9, 0.85 is already lower: no fix offered
        settings.change("lower-memory-utilization", bad, SHIPPED, "v4")
    assert str(e.value).startswith("lower-memory-utilization: engine.gpu_memory_utilization is 0.85, past the "
                                   "known-good 0.9; nothing to lower")


def test_mitigate_reads_the_running_drills_baseline_config_from_its_marker(tmp_path):
    from types import SimpleNamespace

    from sandbox.commands.mitigate import _drill_baseline
    from sandbox.drill.record import DRILL_FILE

    cfg = SimpleNamespace(home=tmp_path)
    assert _drill_baseline(cfg) is None  # no drill
    baseline = tmp_path / "serve_config.1.v2.yaml"
    baseline.write_text("x")
    (tmp_path / DRILL_FILE).write_text(json.dumps({"pid": os.getpid(), "run_dir": str(tmp_path),
                                                    "baseline_config": str(baseline)}))
    assert _drill_baseline(cfg) == baseline
    (tmp_path / DRILL_FILE).write_text(json.dumps({"pid": os.getpid(), "run_dir": str(tmp_path)}))
    assert _drill_baseline(cfg) is None  # a marker from before the field: the shipped config, as before


def test_raising_the_kv_cache_rolls_every_replica_even_where_the_deployed_pool_is_as_shipped():
    new, assignments = settings.change("raise-kv-cache", SHIPPED, SHIPPED, "v2")
    assert assignments == ["version=v2"] and new.version == "v2" and new.args["engine"] == SHIPPED.args["engine"]


def test_requantizing_restores_every_quantization_setting_that_moved():
    coarse = SHIPPED.with_overrides(["engine.quantization=int4", "engine.quantization_granularity=per-module"], "v2")
    assert settings.change("requantize-finer", coarse, SHIPPED, "v3")[1] == \
        ['engine.quantization="none"', 'engine.quantization_granularity="per-channel"']


def test_a_bad_action_is_refused_with_exit_code_2_before_any_stack_is_looked_for(tmp_path):
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "SANDBOX_HOME": str(home), "SANDBOX_RUNS": str(tmp_path / "runs")}
    out = subprocess.run([sys.executable, "-m", "sandbox.cli", "mitigate", "restart-replica"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert out.returncode == 2, out.stderr
    assert "restart-replica needs --replica" in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    assert not home.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("action", "options", "message"), [
    ("bogus", {}, "unknown action 'bogus'; choose from rollback-deploy,"),
    ("restart-replica", {}, "restart-replica needs --replica"),
    ("scale-out", {"version": "v1"}, "scale-out takes no --version"),
    ("rollback-deploy", {"replica": "abc"}, "rollback-deploy takes no --replica"),
    ("shed-load", {"limit": 0}, "--limit must be a positive number of requests, got 0"),
    ("drain-replica", {}, "drain-replica needs --replica"),
])
def test_bad_options_are_refused_by_name(action, options, message):
    with pytest.raises(Refused) as e:
        check_options(action, **options)
    assert str(e.value).startswith(message)


def test_the_options_check_accepts_each_action_with_what_it_takes():
    for action, spec in ACTIONS.items():
        check_options(action, replica="r1" if spec.replica else None, version="v1" if spec.version else None,
                      limit=4 if spec.limit else None)
    with pytest.raises(Refused):
        check_options("no-action", limit=3)


def test_scale_out_on_a_machine_whose_cores_the_replicas_use_says_there_is_no_room(tmp_path, monkeypatch):
    import random

    from faults import FaultContext
    from sandbox.mitigation.actions import NoRoom, scale_out
    from services.stack.settings import SandboxConfig
    from services.stack.state import StackState

    config = tmp_path / "serve_config.yaml"
    SHIPPED.save(config)  # two replicas of one torch thread each
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    ctx = FaultContext(SandboxConfig(home=tmp_path), StackState("run", str(tmp_path), deployed_config=str(config)),
                       random.Random(0))
    with pytest.raises(NoRoom) as e:
        scale_out(ctx, None, 10.0)
    assert str(e.value) == ("scale-out: no room for another replica on this machine: 2 replicas of 1 thread(s) each "
                            "already use its 2 cores (another would share them, not add capacity)")
