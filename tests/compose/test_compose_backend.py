"""`--backend compose`: the compose commands it builds, and its errors when Docker is not there.

Images cannot be pulled here, so `docker compose up` is never run: the commands are checked by the
real docker-compose, the errors with a socket nobody listens on and a PATH without compose binaries.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from services.stack.compose_backend import (
    MARKER,
    OVERRIDE_VAR,
    PROJECT,
    ComposeBackend,
    ComposeUnavailable,
    compose_binary,
    engine_ping,
    owns,
)
from services.stack.compose_cluster import serve_config, stack_state
from services.stack.settings import SandboxConfig

REPO = Path(__file__).resolve().parents[2]
DOCKER_COMPOSE = shutil.which("docker-compose")
needs_compose = pytest.mark.skipif(DOCKER_COMPOSE is None, reason="docker-compose is not installed "
                                   "(scripts/setup.sh installs Debian's docker-compose)")


def _sandbox(tmp_path, *args, path: str = "/usr/local/bin:/usr/bin:/bin", docker_host: str | None = None):
    env = {"PATH": path, "SANDBOX_HOME": str(tmp_path / "home"), "SANDBOX_RUNS": str(tmp_path / "runs"),
           "DOCKER_HOST": docker_host or f"unix://{tmp_path / 'nobody.sock'}"}
    return subprocess.run([sys.executable, "-m", "sandbox.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)


def _live_engine() -> str | None:
    for host in (os.environ.get("DOCKER_HOST"), "unix:///tmp/dockerd/docker.sock", "unix:///var/run/docker.sock"):
        if host:
            try:
                engine_ping(host, timeout_s=2)
                return host
            except ComposeUnavailable:
                continue
    return None


def _compose_state(tmp_path) -> SandboxConfig:
    """The files a running compose stack leaves: the state file naming the compose directory, the marker."""
    cfg = SandboxConfig(home=tmp_path / "home", runs=tmp_path / "runs")
    run_dir = cfg.home / "compose"
    run_dir.mkdir(parents=True)
    deploy = serve_config(cfg.serve_config)
    stack_state(cfg, deploy, run_dir, run_dir / "serve_config.yaml").save(cfg.state_file)
    (run_dir / MARKER).write_text(json.dumps({"project": PROJECT, "command": [DOCKER_COMPOSE or "docker-compose"]}))
    return cfg


def test_a_socket_nobody_listens_on_is_named_and_nothing_starts(tmp_path):
    with pytest.raises(ComposeUnavailable, match=f"no Docker engine answers at unix://{tmp_path}/nobody.sock"):
        engine_ping(f"unix://{tmp_path / 'nobody.sock'}")
    with pytest.raises(ComposeUnavailable, match="only unix:// and tcp://"):
        engine_ping("ssh://somewhere")


@needs_compose
def test_up_with_no_engine_exits_2_naming_docker_host_and_leaves_nothing(tmp_path):
    out = _sandbox(tmp_path, "up", "--backend", "compose")
    assert out.returncode == 2, out.stderr
    err = " ".join(out.stderr.split())
    assert f"no Docker engine answers at unix://{tmp_path}/nobody.sock" in err and "DOCKER_HOST" in err
    assert not (tmp_path / "home").exists()  # no state file, no compose directory


def test_without_a_compose_binary_the_error_names_both_and_exits_2(tmp_path):
    bin_dir = tmp_path / "bin"  # python is here (the CLI runs from sys.executable); docker is not
    bin_dir.mkdir()
    with pytest.raises(ComposeUnavailable, match="neither the `docker compose` plugin nor `docker-compose`"):
        compose_binary({"PATH": str(bin_dir)})
    out = _sandbox(tmp_path, "up", "--backend", "compose", path=str(bin_dir))
    assert out.returncode == 2
    assert "docker-compose" in out.stderr and "docker compose" in out.stderr
    assert not (tmp_path / "home").exists()


@needs_compose
def test_a_drill_on_the_compose_backend_without_an_engine_exits_2_before_anything_starts(tmp_path):
    out = _sandbox(tmp_path, "drill", "slow-replica", "--seed", "1", "--headless", "--backend", "compose")
    assert out.returncode == 2, out.stderr
    assert "no Docker engine answers" in " ".join(out.stderr.split())
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()


def test_an_unknown_backend_is_refused_with_the_choices(tmp_path):
    out = _sandbox(tmp_path, "up", "--backend", "kubernetes")
    assert out.returncode == 2
    assert "local" in out.stderr and "compose" in out.stderr


def test_address_goes_with_the_local_backend_only(tmp_path):
    out = _sandbox(tmp_path, "up", "--backend", "compose", "--address", "127.0.0.1:6379")
    assert out.returncode == 2
    assert "--address" in out.stderr and "--backend local" in " ".join(out.stderr.split())


@needs_compose
def test_the_v1_binary_is_chosen_when_docker_has_no_compose_plugin(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker-compose").symlink_to(DOCKER_COMPOSE)
    assert compose_binary({"PATH": str(bin_dir)}) == [str(bin_dir / "docker-compose")]


@needs_compose
def test_the_commands_name_the_repos_compose_file_and_project_and_docker_compose_accepts_them(tmp_path):
    backend = ComposeBackend(SandboxConfig(home=tmp_path / "home"), env={"PATH": os.environ["PATH"]})
    binary = [DOCKER_COMPOSE]
    assert backend.command("up", "-d", binary=binary) == [DOCKER_COMPOSE, "-f", str(REPO / "compose.yaml"), "-p",
                                                           PROJECT, "up", "-d"]
    env = backend.compose_env()
    assert env["SANDBOX_COMPOSE_DIR"] == str((tmp_path / "home" / "compose").resolve())
    assert env["SANDBOX_UID"] == str(os.getuid())
    token = Path(env["SANDBOX_RAY_TOKEN_FILE"])  # the user's token file, made if there was none: 0600
    assert token.is_file() and token.stat().st_mode & 0o777 == 0o600
    out = subprocess.run(backend.command("config", binary=binary), env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    prometheus = yaml.safe_load(out.stdout)["services"]["prometheus"]
    # The shared directory is the one the backend writes the state and targets into.
    assert f"{env['SANDBOX_COMPOSE_DIR']}/targets:/sandbox/targets:ro" in prometheus["volumes"]
    assert prometheus["user"] == f"{os.getuid()}:{os.getgid()}"


def test_down_without_a_compose_stack_says_so(tmp_path):
    out = _sandbox(tmp_path, "down", "--backend", "compose")
    assert out.returncode == 0, out.stderr
    assert "no compose stack was running" in out.stdout


def test_local_down_refuses_a_compose_stack_and_keeps_its_state(tmp_path):
    cfg = _compose_state(tmp_path)
    assert owns(cfg)
    before = cfg.state_file.read_text()
    out = _sandbox(tmp_path, "down")
    assert out.returncode == 2
    assert "sandbox down --backend compose" in " ".join(out.stderr.split())
    assert cfg.state_file.read_text() == before


@needs_compose
def test_compose_down_with_no_engine_exits_2_and_keeps_the_state(tmp_path):
    cfg = _compose_state(tmp_path)
    out = _sandbox(tmp_path, "down", "--backend", "compose")
    assert out.returncode == 2
    assert "no Docker engine answers" in " ".join(out.stderr.split())
    assert cfg.state_file.is_file() and (cfg.home / "compose" / MARKER).is_file()  # `down` can be run again


def test_the_stack_state_names_the_compose_addresses(tmp_path):
    cfg = _compose_state(tmp_path)
    state = json.loads(cfg.state_file.read_text())
    assert state["api_url"] == "http://127.0.0.1:8000" and state["prometheus_url"] == "http://127.0.0.1:9090"
    assert state["dashboard_url"] == "http://127.0.0.1:8265" and state["ray_started"] is False
    assert state["replicas"] == 2 and state["version"] == "v1" and state["model_name"] == "sandbox-llama"


@needs_compose
def test_the_real_engine_answers_and_down_of_an_empty_project_removes_nothing_else(tmp_path):
    host = _live_engine()
    if host is None:
        pytest.skip("no Docker engine answers here (DOCKER_HOST, /tmp/dockerd/docker.sock, /var/run/docker.sock)")
    assert engine_ping(host) != "?"
    cfg = _compose_state(tmp_path)
    backend = ComposeBackend(cfg, env={"PATH": os.environ["PATH"], "DOCKER_HOST": host})
    report = backend.down()  # the project has no containers: compose says so, the state goes
    assert report["stopped"] == [f"compose project {PROJECT}"]
    assert not cfg.state_file.exists() and not (cfg.home / "compose" / MARKER).exists()


def test_a_drill_that_cannot_run_is_refused_before_the_compose_stack_starts(tmp_path):
    # The engine would be asked only after the plan is checked: this drill stops at the plan.
    out = _sandbox(tmp_path, "drill", "ttft-after-deploy", "--seed", "1", "--headless", "--duration", "30",
                   "--backend", "compose")
    assert out.returncode == 2
    err = " ".join(out.stderr.split())
    assert "must be longer than the injection time" in err and "Docker" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()


OFFLINE = REPO / "docker" / "compose.offline.yaml"


@needs_compose
def test_an_override_is_merged_after_compose_yaml(tmp_path):
    env = {"PATH": os.environ["PATH"], OVERRIDE_VAR: str(OFFLINE), "SANDBOX_WHEELHOUSE_URL": "http://127.0.0.1:8765/"}
    backend = ComposeBackend(SandboxConfig(home=tmp_path / "home"), env=env)
    binary = [DOCKER_COMPOSE]
    assert backend.command("up", "-d", binary=binary) == [DOCKER_COMPOSE, "-f", str(REPO / "compose.yaml"), "-f",
                                                           str(OFFLINE), "-p", PROJECT, "up", "-d"]
    out = subprocess.run(backend.command("config", binary=binary), env=backend.compose_env(), capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    for name in ("ray-head", "ray-worker", "sandbox"):  # the project image, from the Debian base and the wheelhouse
        assert services[name]["build"]["args"] == {"BASE": "sandbox-base:bookworm",
                                                   "PIP_SOURCE": "--no-index --find-links http://127.0.0.1:8765/"}
        assert services[name]["build"]["context"] == str(REPO)  # compose.yaml's directory, not docker/
    assert services["prometheus"]["image"] == "sandbox-base:bookworm"  # Debian's Prometheus, compose.yaml's entrypoint
    assert services["prometheus"]["entrypoint"][:2] == ["/bin/sh", "-c"]
    assert "--web.listen-address=127.0.0.1:9090" in services["prometheus"]["command"]  # compose.yaml's flags kept
    assert services["grafana"]["profiles"] == services["cadvisor"]["profiles"] == ["dashboards"]


def test_an_override_that_is_not_there_exits_2_before_anything_starts(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(ComposeUnavailable, match=f"{OVERRIDE_VAR}: no such compose file: {missing}"):
        ComposeBackend(SandboxConfig(home=tmp_path / "home"), env={"PATH": os.environ["PATH"],
                                                                   OVERRIDE_VAR: str(missing)}).check()
    out = subprocess.run([sys.executable, "-m", "sandbox.cli", "up", "--backend", "compose"],
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin", "SANDBOX_HOME": str(tmp_path / "home"),
                              "SANDBOX_RUNS": str(tmp_path / "runs"), OVERRIDE_VAR: str(missing)},
                         capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert out.returncode == 2 and "no such compose file" in " ".join(out.stderr.split())
    assert not (tmp_path / "home").exists()
