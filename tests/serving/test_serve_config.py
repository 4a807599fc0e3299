"""Deployment settings: validation, `--set` overrides, version bumps; profiles and sandbox settings."""
import random

import pytest

from incidents.profiles import PROFILES, LengthBand, TrafficProfile
from services.serve.config import ReplicaKnobs, ServeAppConfig, default_config_path
from services.stack.deploy_config import SERVER, DeployConfig, next_version
from services.stack.settings import SandboxConfig


def config():
    return DeployConfig.load(default_config_path())


def test_the_shipped_serve_config_is_valid():
    cfg = config()
    assert cfg.app_name == "llm" and cfg.version == "v1" and cfg.replicas == 2
    assert cfg.app["import_path"] == "services.serve.app:build_app"


@pytest.mark.parametrize("args,field", [({"engine": {"max_num_seq": 3}}, "max_num_seq"),
                                        ({"version": "v 2"}, "version"), ({"model_name": ""}, "model_name"),
                                        ({"default_max_tokens": 0}, "default_max_tokens"),
                                        ({"colour": "red"}, "colour")])
def test_bad_application_args_raise_naming_the_field(args, field):
    with pytest.raises(ValueError, match=field):
        ServeAppConfig.from_dict(args)


@pytest.mark.parametrize("knobs,field", [({"max_num_seqs": 0}, "max_num_seqs"),
                                         ({"enable_prefix_caching": "yes"}, "enable_prefix_caching"),
                                         ({"speed": 2}, "speed")])
def test_bad_knobs_raise_naming_the_field(knobs, field):
    with pytest.raises(ValueError, match=field):
        ReplicaKnobs.from_dict(knobs)


def test_an_engine_setting_is_a_new_version():
    new = config().with_overrides(["max_num_batched_tokens=256", "engine.enable_prefix_caching=false"])
    assert new.version == "v2"
    assert new.args["engine"]["max_num_batched_tokens"] == 256
    assert new.args["engine"]["enable_prefix_caching"] is False


def test_knobs_and_replicas_keep_the_version():
    new = config().with_overrides(["knobs.max_num_seqs=4", "replicas=3"])
    assert new.version == "v1"
    assert new.deployment(SERVER)["user_config"] == {"max_num_seqs": 4}
    assert new.replicas == 3


def test_an_environment_variable_goes_to_the_replicas_runtime_env_as_a_new_version_and_an_empty_one_removes_it():
    new = config().with_overrides(["env.OMP_WAIT_POLICY=ACTIVE"])
    assert new.version == "v2" and new.env == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert new.deployment(SERVER)["ray_actor_options"] == {"num_cpus": 1,
                                                          "runtime_env": {"env_vars": {"OMP_WAIT_POLICY": "ACTIVE"}}}
    back = new.with_overrides(["env.OMP_WAIT_POLICY="], version="v1")
    assert back.version == "v1" and back.env == {} and back.deployment(SERVER)["ray_actor_options"] == {"num_cpus": 1}
    with pytest.raises(ValueError, match="env.omp: an environment variable name"):
        config().with_overrides(["env.omp=1"])


def test_an_explicit_version_wins():
    assert config().with_overrides(["max_num_seqs=8"], version="canary").version == "canary"


def test_unknown_settings_are_refused():
    with pytest.raises(ValueError, match="unknown setting"):
        config().with_overrides(["knobs.speed=2"])
    with pytest.raises(ValueError, match="key=value"):
        config().with_overrides(["replicas"])


def test_next_version():
    assert next_version("v1") == "v2" and next_version("v9") == "v10" and next_version("blue") == "blue-2"


def test_for_run_sets_the_api_port_and_replicas():
    run = config().for_run("127.0.0.1", 8123, replicas=1)
    assert run.data["http_options"] == {"host": "127.0.0.1", "port": 8123} and run.replicas == 1


def test_sandbox_ports_must_differ_and_come_from_the_environment():
    with pytest.raises(ValueError, match="ports must differ"):
        SandboxConfig(api_port=9090)
    cfg = SandboxConfig.from_env({"SANDBOX_API_PORT": "8111", "SANDBOX_SCRAPE_INTERVAL_S": "2",
                                  "PROMETHEUS_BIN": "/opt/prom"})
    assert cfg.api_port == 8111 and cfg.scrape_interval_s == 2.0 and cfg.prometheus_bin == "/opt/prom"
    with pytest.raises(ValueError, match="SANDBOX_API_PORT"):
        SandboxConfig.from_env({"SANDBOX_API_PORT": "eighty"})


def test_profiles_sample_deterministically_from_a_seed():
    profile = PROFILES["default"]
    a = [profile.sample(random.Random(5)).body("m") for _ in range(3)]
    b = [profile.sample(random.Random(5)).body("m") for _ in range(3)]
    assert a == b


def test_shared_prefix_profile_mostly_starts_with_the_system_prompt():
    rng = random.Random(0)
    reqs = [PROFILES["shared-prefix"].sample(rng) for _ in range(200)]
    assert sum(r.system is not None for r in reqs) > 170
    chat = next(r for r in reqs if r.chat and r.system)
    assert chat.body("m")["messages"][0]["role"] == "system"


def test_a_profile_validates_its_fields():
    with pytest.raises(ValueError, match="task_mix"):
        TrafficProfile("x", "", {"poetry": 1.0}, 0.5, (LengthBand(1, 0, 0),), (1, 2))
    with pytest.raises(ValueError, match="output_tokens"):
        TrafficProfile("x", "", {"copy": 1.0}, 0.5, (LengthBand(1, 0, 0),), (3, 2))


def test_torch_threads_all_is_as_many_as_the_replicas_process_may_use_and_nonsense_is_refused():
    import os
    assert ServeAppConfig(engine={"torch_threads": "all"}).engine_config().torch_threads == \
        len(os.sched_getaffinity(0))
    assert ServeAppConfig().engine_config().torch_threads == 1  # one thread a replica unless told otherwise
    for bad in ("many", 0, -2, True, 1.5):
        with pytest.raises(ValueError, match="engine.torch_threads must be a positive integer or 'all'"):
            ServeAppConfig(engine={"torch_threads": bad})


def test_a_shipped_generation_config_is_named_and_resolved_to_its_directory():
    from services.model.paths import generation_config_path
    engine = ServeAppConfig(engine={"generation_config": "instruct"}).engine_config()
    assert engine.generation_config == str(generation_config_path("instruct"))
    assert engine.extra_eos_token_ids(2) == (73,)
