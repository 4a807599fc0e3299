"""When a deploy fault's rollout counts as landed: the new config is Serve's target and one of its replicas ran."""
from services.stack.deploy_config import DeployConfig
from services.stack.deployer import _rolled_out_failing


def _config(max_num_seqs: int) -> DeployConfig:
    return DeployConfig({"applications": [{"name": "llm", "args": {"engine": {"max_num_seqs": max_num_seqs}}}]})


def _detail(max_num_seqs: int) -> dict:
    return {"status": "DEPLOY_FAILED", "deployed_app_config": {"args": {"engine": {"max_num_seqs": max_num_seqs}}}}


def test_a_new_version_whose_replicas_ran_and_then_failed_has_rolled_out():
    assert _rolled_out_failing(_detail(128), _config(128), ran={"r3"})


def test_a_new_version_that_never_ran_a_replica_has_not_rolled_out():
    assert not _rolled_out_failing(_detail(128), _config(128), ran=set())


def test_a_failure_while_serve_still_targets_the_old_config_is_no_rollout():
    assert not _rolled_out_failing(_detail(16), _config(128), ran={"r3"})
    assert not _rolled_out_failing(None, _config(128), ran={"r3"})
