"""The compose deployment, live: up, the control plane refuses a caller without the token, a drill, down, nothing left.

    scripts/compose_offline.sh build && eval "$(scripts/compose_offline.sh env)"    # where no registry is reachable
    .venv/bin/python bench/compose_live.py [--drill-seed N] [--no-drill] > compose-live.json

Steps, each timed and checked (a JSON object on stdout; progress on stderr):

    up          `sandbox up --backend compose --json`: the containers, the Serve app, Prometheus scraping them
    api         a chat completion through the real `openai` client
    token       what a caller without the token gets: the dashboard (Serve's REST API, jobs, state) 401, a wrong
                token 403, a deploy by PUT 401; the GCS refuses a fresh process with no token or a wrong one and
                answers one with it; Prometheus' lifecycle and admin endpoints refuse
    drill       `sandbox drill --random --headless --duration 300 --json --backend compose` at a fresh seed: its
                page (or the control's report) and that it ended "finished"
    down        `sandbox down --backend compose`: no container of the project, no listening port of the stack

Exit code 0 when every check held, 1 otherwise. Not a test: it needs a Docker engine and about 10 minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.stack.compose_backend import PROJECT  # noqa: E402
from services.stack.compose_cluster import PORTS  # noqa: E402
from services.stack.control_probe import (  # noqa: E402
    DASHBOARD_PATHS,
    PROMETHEUS_REFUSALS,
    dashboard_status,
    gcs_caller,
    prometheus_status,
)
from services.stack.state import StackState  # noqa: E402


def log(msg: str) -> None:
    print(f"[compose-live {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sandbox(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbox.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout_s, check=False)


def listening_ports() -> set[int]:
    out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=False).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.split()}


def project_containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}",
                          "--format", "{{.Names}}"], capture_output=True, text=True, check=False)
    return out.stdout.split()


def token_checks(state: StackState, home: Path) -> dict:
    token = Path(state.ray_token_file).read_text().strip()
    got = {"dashboard_without": {p: dashboard_status(state.dashboard_url, p) for p in DASHBOARD_PATHS},
           "dashboard_wrong": {p: dashboard_status(state.dashboard_url, p, token="0" * 64) for p in DASHBOARD_PATHS},
           "dashboard_with": {p: dashboard_status(state.dashboard_url, p, token=token) for p in DASHBOARD_PATHS},
           "deploy_without": dashboard_status(state.dashboard_url, "/api/serve/applications/", method="PUT",
                                              json={"applications": []}),
           "prometheus": {p: prometheus_status(state.prometheus_url, p) for p, _ in PROMETHEUS_REFUSALS}}
    wrong = home / "wrong-token"
    wrong.write_text("0" * 64)
    got["gcs_without"] = gcs_caller(state.ray_address, home)
    got["gcs_wrong"] = gcs_caller(state.ray_address, home, token_file=wrong)
    got["gcs_with"] = gcs_caller(state.ray_address, home, token_file=state.ray_token_file)
    got["ok"] = (all(s == 401 for s in got["dashboard_without"].values())
                 and all(s == 403 for s in got["dashboard_wrong"].values())
                 and all(s == 200 for s in got["dashboard_with"].values())
                 and got["deploy_without"] == 401
                 and all(got["prometheus"][p] == code for p, code in PROMETHEUS_REFUSALS)
                 and got["gcs_without"][0] == got["gcs_wrong"][0] == "refused" and got["gcs_with"][0] == "nodes")
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drill-seed", type=int, default=None, help="the drill's seed (default: a fresh random one)")
    ap.add_argument("--no-drill", action="store_true", help="up, the token checks and down only")
    args = ap.parse_args()
    if not os.environ.get("DOCKER_HOST"):
        print("compose_live: DOCKER_HOST is not set (eval \"$(scripts/compose_offline.sh env)\")", file=sys.stderr)
        return 2
    report: dict = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "override": os.environ.get("SANDBOX_COMPOSE_OVERRIDE")}
    ok = True
    try:
        log("sandbox up --backend compose")
        t0 = time.monotonic()
        up = sandbox("up", "--backend", "compose", "--json")
        report["up"] = {"exit": up.returncode, "seconds": round(time.monotonic() - t0, 1),
                        "stderr_tail": up.stderr[-800:] if up.returncode else ""}
        if up.returncode != 0:
            return 1
        state = StackState.load(_state_file())
        report["up"]["containers"] = project_containers()

        log("a chat completion through the openai client")
        import openai
        client = openai.OpenAI(base_url=f"{state.api_url}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model=state.model_name, max_tokens=8, temperature=0,
                                               messages=[{"role": "user", "content": "copy: abc ->"}])
        report["api"] = {"model": reply.model, "completion_tokens": reply.usage.completion_tokens}

        log("the control plane without the token")
        with tempfile.TemporaryDirectory() as home:
            report["token"] = token_checks(state, Path(home))
        ok &= report["token"]["ok"]

        if not args.no_drill:
            seed = args.drill_seed if args.drill_seed is not None else random.SystemRandom().randrange(1, 2**31)
            log(f"sandbox drill --random --seed {seed} --headless --duration 300 --backend compose")
            t0 = time.monotonic()
            drill = sandbox("drill", "--random", "--seed", str(seed), "--headless", "--duration", "300", "--json",
                            "--backend", "compose")
            result = json.loads(drill.stdout) if drill.stdout.strip().startswith("{") else {}
            report["drill"] = {"seed": seed, "exit": drill.returncode, "seconds": round(time.monotonic() - t0, 1),
                               "status": result.get("status"), "page": result.get("page"),
                               "stderr_tail": drill.stderr[-800:] if drill.returncode else ""}
            ok &= drill.returncode == 0 and result.get("status") == "finished"
    finally:
        log("sandbox down --backend compose")
        down = sandbox("down", "--backend", "compose")
        stack_ports = {p for ports in PORTS.values() for p in ports.values()}
        left = sorted(listening_ports() & stack_ports)
        report["down"] = {"exit": down.returncode, "containers_left": project_containers(), "ports_left": left}
        ok &= down.returncode == 0 and not report["down"]["containers_left"] and not left
        report["ok"] = bool(ok)
        print(json.dumps(report, indent=1))
    return 0 if ok else 1


def _state_file() -> Path:
    from services.stack.settings import SandboxConfig

    return SandboxConfig().state_file


if __name__ == "__main__":
    sys.exit(main())
