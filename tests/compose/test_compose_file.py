"""compose.yaml validates (docker-compose and the Compose specification) and deploys what the README says.

No registry is reachable here, so the images are never pulled or built: the file is checked by Debian's
docker-compose (`config`), against the specification's JSON Schema that package ships, and structurally.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from services.stack.alerts import rule_files
from services.stack.compose_cluster import (
    HEAD_RESOURCE,
    PORTS,
    PROMETHEUS_CONFIG,
    RULES_DIR,
    WORKER_PORT_RANGES,
    prometheus_config,
    serve_config,
)
from services.stack.deploy_config import INGRESS, SERVER
from services.stack.settings import SandboxConfig

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose.yaml"
SPEC = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")  # Debian's docker-compose
SERVICES = {"ray-head", "ray-worker", "ray-worker-gpu", "prometheus", "grafana", "cadvisor", "sandbox"}
DOCKER_COMPOSE = shutil.which("docker-compose")
needs_compose = pytest.mark.skipif(DOCKER_COMPOSE is None, reason="docker-compose is not installed "
                                   "(scripts/setup.sh installs Debian's docker-compose)")


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _mounts(service: dict) -> dict[str, str]:
    """{container path: host path (resolved against the repo, defaults of ${VAR:-default} taken)}."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", volume).split(":")
        out[target] = str((REPO / source).resolve()) if source.startswith(".") else source
    return out


@needs_compose
@pytest.mark.parametrize("profile", [None, "gpu"])
def test_docker_compose_accepts_the_file(tmp_path, profile):
    args = [DOCKER_COMPOSE, "-f", str(COMPOSE), *(["--profile", profile] if profile else []), "config"]
    env = {"PATH": os.environ["PATH"], "SANDBOX_RAY_TOKEN_FILE": str(tmp_path / "ray-token")}
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert set(yaml.safe_load(out.stdout)["services"]) == SERVICES  # v1 lists profiled services too


@needs_compose
def test_without_the_ray_token_files_variable_compose_refuses_the_file_saying_how_to_set_it(tmp_path):
    out = subprocess.run([DOCKER_COMPOSE, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={"PATH": os.environ["PATH"]}, check=False)
    assert out.returncode != 0
    assert "export SANDBOX_RAY_TOKEN_FILE=$(python3 -m services.stack.ray_token)" in out.stderr


def test_every_ray_node_and_the_controller_run_with_the_token_from_the_secret_and_never_the_token_itself():
    services = _services()
    assert yaml.safe_load(COMPOSE.read_text())["secrets"]["ray-token"]["file"].startswith("${SANDBOX_RAY_TOKEN_FILE:?")
    for name in ("ray-head", "ray-worker", "ray-worker-gpu"):
        env = services[name]["environment"]
        assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"]) == ("token", "/run/secrets/ray-token"), name
        assert services[name]["secrets"] == ["ray-token"], name
    assert services["sandbox"]["environment"]["SANDBOX_RAY_TOKEN_FILE"] == "/run/secrets/ray-token"
    assert services["sandbox"]["secrets"] == ["ray-token"]
    # the head's healthcheck asks Serve's REST API, which now wants the token: it sends it, read from the secret
    assert "'Bearer ' + open('/run/secrets/ray-token')" in services["ray-head"]["healthcheck"]["test"][-1]
    assert "RAY_AUTH_TOKEN:" not in COMPOSE.read_text()  # the token's value is never in the file or the env


@needs_compose
def test_the_file_is_valid_against_the_compose_specification():
    schema = json.loads(SPEC.read_text())
    jsonschema.Draft201909Validator.check_schema(schema)
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}"
              for e in jsonschema.Draft201909Validator(schema).iter_errors(yaml.safe_load(COMPOSE.read_text()))]
    assert errors == []


def test_every_service_of_the_deployment_is_defined():
    services = _services()
    assert set(services) == SERVICES
    for name in ("ray-head", "ray-worker", "ray-worker-gpu", "sandbox"):
        assert services[name]["build"]["dockerfile"] == "Dockerfile", name  # the project image
    assert "--head" in services["ray-head"]["command"] and "--num-cpus=0" in services["ray-head"]["command"]
    for worker in ("ray-worker", "ray-worker-gpu"):
        assert "--address=127.0.0.1:6379" in services[worker]["command"]
    assert services["sandbox"]["command"][-1].startswith("python -m services.stack.compose_cluster deploy")


def _listen_ports(service: dict) -> tuple[set[int], set[tuple[int, int]]]:
    """Ports a service's command and environment tell it to listen on; worker-port ranges apart."""
    args = [str(a) for a in service.get("command", [])]
    args += [f"--{k.lower()}={v}" for k, v in service.get("environment", {}).items()]
    ports = {int(m.group(1)) for a in args if "worker-port" not in a
             for m in [re.fullmatch(r"--[\w.-]*(?:port|listen-address=[\d.]+:)=?(\d+)", a)] if m}
    low = [int(a.split("=")[1]) for a in args if a.startswith("--min-worker-port=")]
    high = [int(a.split("=")[1]) for a in args if a.startswith("--max-worker-port=")]
    return ports, set(zip(low, high))


def test_services_listen_only_on_the_documented_ports():
    services = _services()
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Containerized deployment (Docker Compose)"):]
    section = " ".join(section[:section.index("\n## ", 3)].split())
    for name, service in services.items():
        assert service["network_mode"] == "host", name  # traffic stays on the host
        assert "ports" not in service and "expose" not in service, name  # nothing published
        ports, ranges = _listen_ports(service)
        if name == "ray-head":  # the Serve proxy's port comes from the Serve config the sandbox service deploys
            ports.add(serve_config(REPO / "services" / "serve_config.yaml").data["http_options"]["port"])
        assert ports == set(PORTS.get(name, {}).values()), name
        assert ranges == ({WORKER_PORT_RANGES[name]} if name in WORKER_PORT_RANGES else set()), name
        for port in ports:
            assert str(port) in section, f"{name}'s port {port} is not in the README's compose section"
        for low, high in ranges:
            assert f"{low}-{high}" in section, f"{name}'s worker ports {low}-{high} are not in the README"
    assert services["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    assert "--dashboard-host=127.0.0.1" in services["ray-head"]["command"]
    assert "--listen_ip=127.0.0.1" in services["cadvisor"]["command"]
    assert "--web.listen-address=127.0.0.1:9090" in services["prometheus"]["command"]


def test_grafana_is_provisioned_from_the_repos_dashboards_with_anonymous_viewers():
    grafana = _services()["grafana"]
    env, mounts = grafana["environment"], _mounts(grafana)
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    provider = yaml.safe_load((REPO / "dashboards/provisioning/dashboards/sandbox.yaml").read_text())["providers"][0]
    dashboards_dir = Path(mounts[provider["options"]["path"]])
    assert dashboards_dir == REPO / "dashboards" / "grafana"
    assert len(sorted(dashboards_dir.glob("*.json"))) == 4
    assert Path(mounts["/etc/grafana/provisioning/dashboards"]) == REPO / "dashboards/provisioning/dashboards"
    assert env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].startswith(provider["options"]["path"] + "/")
    assert (dashboards_dir / Path(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]).name).is_file()
    # The compose datasource is the repo's datasource (dashboards refer to it by name and uid), at the
    # address the compose Prometheus listens on.
    ours = yaml.safe_load((Path(mounts["/etc/grafana/provisioning/datasources"]) / "prometheus.yaml").read_text())
    repo = yaml.safe_load((REPO / "dashboards/provisioning/datasources/prometheus.yaml").read_text())
    keep = ("name", "uid", "type", "access", "isDefault", "jsonData")
    same = [{k: d[k] for k in keep} for d in repo["datasources"]]
    assert [{k: d[k] for k in keep} for d in ours["datasources"]] == same
    assert ours["datasources"][0]["url"] == f"http://127.0.0.1:{PORTS['prometheus']['http']}"
    assert _services()["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_prometheus_loads_the_repos_rule_files_and_the_generated_config():
    prometheus = _services()["prometheus"]
    mounts = _mounts(prometheus)
    # the repo's rules, copied at every start into the shared directory's rules/, where a calibrated drill
    # replaces the thresholds file and reloads it (the local stack's run directory does the same)
    assert Path(mounts["/etc/prometheus/defaults"]) == REPO / "dashboards" / "rules"
    assert Path(mounts[str(RULES_DIR)]) == REPO / "runs" / "sandbox" / "compose" / "rules"
    entrypoint = prometheus["entrypoint"]
    assert entrypoint[:2] == ["/bin/sh", "-c"] and entrypoint[3] == "prometheus"
    assert entrypoint[2] == f'cp -f /etc/prometheus/defaults/*.rules.yml {RULES_DIR}/ && exec prometheus "$$@"'
    assert Path(mounts["/etc/prometheus/prometheus.yml"]) == PROMETHEUS_CONFIG
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == [str(RULES_DIR / p.name) for p in rule_files()] and config["rule_files"]
    assert {j["job_name"] for j in config["scrape_configs"]} == {"prometheus", "ray", "traffic", "canary", "cadvisor"}
    # Ray's service-discovery file and the traffic/canary targets are read where the volumes put them.
    ray_sd = next(j for j in config["scrape_configs"] if j["job_name"] == "ray")["file_sd_configs"][0]["files"][0]
    assert ray_sd.startswith("/tmp/ray/") and mounts["/tmp/ray"] == "ray-head-tmp"
    assert _mounts(_services()["ray-head"])["/tmp/ray"] == "ray-head-tmp"
    # nobody stops, reloads or erases it over HTTP: a drill keeps its data by copying the TSDB
    assert not {"--web.enable-admin-api", "--web.enable-lifecycle"} & set(prometheus["command"])


def test_the_committed_prometheus_config_is_what_sandbox_generates():
    assert PROMETHEUS_CONFIG.read_text() == prometheus_config(), (
        "docker/prometheus/prometheus.yml is stale: python -m services.stack.compose_cluster prometheus-config > "
        "docker/prometheus/prometheus.yml")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian's prometheus)")
def test_promtool_accepts_the_prometheus_config_with_the_rules(tmp_path):
    text = PROMETHEUS_CONFIG.read_text().replace(str(RULES_DIR), str(REPO / "dashboards" / "rules"))
    (tmp_path / "prometheus.yml").write_text(text)
    out = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "rules found" in out.stdout


def test_the_gpu_profile_reserves_one_nvidia_gpu():
    services = _services()
    gpu = services["ray-worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "--num-gpus=1" in gpu["command"] and "cu" in gpu["build"]["args"]["TORCH_INDEX_URL"].rsplit("/", 1)[1]
    assert all("profiles" not in s for name, s in services.items() if name != "ray-worker-gpu")


def test_every_service_has_a_healthcheck_and_waits_for_what_it_needs():
    services = _services()
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] == "CMD", name
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert services["sandbox"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert "8000/v1/models" in services["sandbox"]["healthcheck"]["test"][-1]  # healthy once the API serves


def test_the_compose_serve_config_pins_the_ingress_to_the_head_and_replicas_to_workers():
    deploy = serve_config(REPO / "services" / "serve_config.yaml")
    assert deploy.data["proxy_location"] == "HeadOnly"
    assert deploy.data["http_options"] == {"host": "127.0.0.1", "port": PORTS["ray-head"]["api"]}
    assert deploy.deployment(INGRESS)["ray_actor_options"]["resources"] == {HEAD_RESOURCE: 0.001}
    # The head offers no CPU: every replica (one CPU each) lands on a worker, which has the local head's room
    # for a rolling update (every new replica starts before the old ones stop).
    assert deploy.deployment(SERVER)["ray_actor_options"]["num_cpus"] == 1
    assert deploy.deployment(SERVER)["max_surge_percent"] == 100
    worker_cpus = next(a for a in _services()["ray-worker"]["command"] if a.startswith("--num-cpus="))
    assert worker_cpus == f"--num-cpus=${{SANDBOX_WORKER_CPUS:-{2 * deploy.replicas}}}"
    assert SandboxConfig().ray_num_cpus == 2 * deploy.replicas
