"""Runtime knobs reach the running replicas through reconfigure(), without a restart."""
import pytest

from services.stack.deployer import deploy_changes
from services.stack.serve_control import ServeControl

pytestmark = pytest.mark.stack


def replica_pids(stack) -> dict[str, int]:
    ctl = ServeControl(stack.state.dashboard_url, token_file=stack.state.ray_token_file)
    try:
        return {r["replica_id"]: r["pid"] for r in ctl.replicas(stack.state.app_name, "LLMServer")}
    finally:
        ctl.close()


def test_a_knob_change_applies_in_place_with_the_same_pids(stack):
    pids = replica_pids(stack)
    report = deploy_changes(stack.cfg, stack.refresh(), ["knobs.max_num_seqs=4"], None, 120)
    assert report["rolling"] is False and report["version"] == stack.state.version
    stack.wait_for('count(vllm:cache_config_info{max_num_seqs="4"} == 1)', lambda v: v == 2)
    assert replica_pids(stack) == pids
    # Requests still flow under the new limit; then the deployed value comes back.
    out = stack.openai().completions.create(model=stack.model, prompt="copy: ab -> ", max_tokens=3, temperature=0)
    assert out.usage.completion_tokens >= 1
    deploy_changes(stack.cfg, stack.refresh(), ["knobs.max_num_seqs=null"], None, 120)
    stack.wait_for('count(vllm:cache_config_info{max_num_seqs="32"} == 1)', lambda v: v == 2)
    assert replica_pids(stack) == pids


def test_an_impossible_knob_is_refused_before_deploying(stack):
    with pytest.raises(ValueError, match="max_num_seqs"):
        deploy_changes(stack.cfg, stack.refresh(), ["knobs.max_num_seqs=0"], None, 60)
