"""Every `sandbox mitigate` action once on the running stack, through the CLI as a candidate runs it.

    .venv/bin/sandbox up && .venv/bin/python bench/mitigation_check.py > mitigation.json; .venv/bin/sandbox down

A bad deploy first (prefix caching off, as v2), then: `enable-prefix-caching` (a new version with it on),
`rollback-deploy` (back to the version before: v2 again), `rollback-deploy --version v1`, `restart-replica` on
one replica (Serve replaces it), `shed-load` (the ingress's limit; lifted again after), `scale-out` and
`raise-cpu-limit` (refused or done, as the machine allows), and a replica that does not exist (exit 2). After
each, what the stack says it serves: the deployed version and its prefix-caching setting, the replica ids, and
one completion through the OpenAI API. One JSON object per step, then a summary; exit 1 if a step did not do
what it says. Not a test: a few minutes of rolling deploys (the suite keeps the unit checks in
tests/mitigation and the limit's 429 in tests/serving/test_admission.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.stack.deploy_config import INGRESS, SERVER, DeployConfig
from services.stack.serve_control import ServeControl
from services.stack.settings import SandboxConfig
from services.stack.state import StackState


def sandbox(*args: str) -> tuple[int, dict | str]:
    out = subprocess.run([str(REPO / ".venv" / "bin" / "sandbox"), *args], capture_output=True, text=True,
                         timeout=600, check=False)
    try:
        return out.returncode, json.loads(out.stdout)
    except json.JSONDecodeError:
        return out.returncode, " ".join(out.stderr.split())[-400:]


def serving(cfg: SandboxConfig) -> dict:
    state = StackState.load(cfg.state_file)
    config = DeployConfig.load(Path(state.deployed_config))
    ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
    try:
        replicas = sorted(r["replica_id"] for r in ctl.replicas(state.app_name, SERVER) if r.get("state") == "RUNNING")
    finally:
        ctl.close()
    reply = httpx.post(f"{state.api_url}/v1/completions", timeout=120,
                       json={"model": config.model_name, "prompt": "copy: abc -> ", "max_tokens": 4, "temperature": 0})
    return {"version": config.version,
            "prefix_caching": (config.args.get("engine") or {}).get("enable_prefix_caching"),
            "admission_limit": (config.deployment(INGRESS).get("user_config") or {}).get("max_inflight_requests"),
            "replicas": replicas, "completion_status": reply.status_code}


def main() -> int:
    cfg = SandboxConfig.from_env()
    failures = []

    def step(name: str, args: list[str], want_rc: tuple[int, ...], check=None) -> dict:
        rc, report = sandbox(*args)
        after = serving(cfg)
        ok = rc in want_rc and after["completion_status"] == 200 and (check is None or check(report, after))
        row = {"step": name, "rc": rc, "report": report, "after": after, "ok": bool(ok)}
        print(json.dumps(row), flush=True)
        if not ok:
            failures.append(name)
        return row

    start = serving(cfg)
    print(json.dumps({"step": "start", "after": start}), flush=True)
    step("bad deploy", ["deploy", "--set", "engine.enable_prefix_caching=false", "--json"], (0,),
         lambda r, a: a["prefix_caching"] is False)
    bad = serving(cfg)["version"]
    step("enable-prefix-caching", ["mitigate", "enable-prefix-caching", "--json"], (0,),
         lambda r, a: a["prefix_caching"] is True and a["version"] not in (bad, start["version"]))
    step("rollback-deploy", ["mitigate", "rollback-deploy", "--json"], (0,),
         lambda r, a: a["version"] == bad and a["prefix_caching"] is False)
    step("rollback-deploy --version", ["mitigate", "rollback-deploy", "--version", start["version"], "--json"], (0,),
         lambda r, a: a["version"] == start["version"] and a["prefix_caching"] in (True, None))
    victim = serving(cfg)["replicas"][0]
    step("restart-replica", ["mitigate", "restart-replica", "--replica", victim, "--json"], (0,),
         lambda r, a: victim not in a["replicas"] and len(a["replicas"]) == len(start["replicas"]))
    step("shed-load", ["mitigate", "shed-load", "--json"], (0,),
         lambda r, a: a["admission_limit"] == r["max_inflight_requests"])
    step("lift the limit", ["deploy", "--set", "ingress.max_inflight_requests=null", "--json"], (0,),
         lambda r, a: a["admission_limit"] is None)
    step("scale-out", ["mitigate", "scale-out", "--json"], (0, 1))
    step("raise-cpu-limit", ["mitigate", "raise-cpu-limit", "--json"], (0, 2))
    step("unknown replica", ["mitigate", "restart-replica", "--replica", "no-such-replica", "--json"], (2,),
         lambda r, a: a["replicas"] == serving(cfg)["replicas"])
    print(json.dumps({"summary": "every step did what it says" if not failures else "failed", "failed": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
