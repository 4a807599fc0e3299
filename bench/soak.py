"""Soak: a steady load near 70 % of the stack's capacity for 30 minutes; does anything grow or stick?

    .venv/bin/sandbox up && .venv/bin/python bench/soak.py --minutes 30 > soak.json

The load is a share of the default profile's calibrated ceiling (`sandbox calibrate`, cached or
measured now), Poisson arrivals through the OpenAI API. Every 30 s it samples each LLMServer
replica's process (resident memory, open file descriptors, threads) and the fleet's KV-cache
usage from Prometheus. It prints one JSON object: errors (statuses other than 200), each
replica's resident memory after the warm-up (the first 2 minutes) and at the end with the growth
in per cent, its descriptors and threads at both points, and KV usage idle before the load and
30 s after it stopped. The issue's bar: no error, memory growth <= 5 %, KV usage back to its idle
value, no descriptor or thread growth. Not a test: it runs for half an hour.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incidents.profiles import PROFILES
from sandbox.traffic.generator import TrafficStats, run_traffic
from services.stack.prometheus import PrometheusClient
from services.stack.serve_control import ServeControl, running_replicas
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

WARM_UP_S = 120.0
SAMPLE_S = 30.0


def replica_figures(state: StackState) -> dict[str, dict]:
    """replica id -> resident memory (MiB), open descriptors and threads of its process."""
    ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
    try:
        replicas = running_replicas(ctl.application(state.app_name) or {}, "LLMServer")
    finally:
        ctl.close()
    out = {}
    for r in replicas:
        proc = Path(f"/proc/{r['pid']}")
        try:
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line)
            out[r["replica_id"]] = {"pid": r["pid"], "rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1),
                                    "fds": len(list((proc / "fd").iterdir())), "threads": int(status["Threads"])}
        except (OSError, KeyError, ValueError):
            continue
    return out


def kv_usage(prom: PrometheusClient) -> float | None:
    return prom.value("max(vllm:kv_cache_usage_perc)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="minutes of load (default 30)")
    ap.add_argument("--share", type=float, default=0.7, help="share of the default profile's ceiling (default 0.7)")
    args = ap.parse_args()
    if not 0 < args.share <= 1 or args.minutes * 60 <= WARM_UP_S:
        ap.error(f"--share must be in (0, 1] and --minutes longer than the {WARM_UP_S / 60:g}-minute warm-up")
    cfg = SandboxConfig.from_env()
    state = StackState.load(cfg.state_file)
    cal = subprocess.run([sys.executable, "-m", "sandbox.cli", "calibrate", "--profile", "default", "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if cal.returncode != 0:
        print(json.dumps({"error": f"calibration failed: {cal.stderr[-500:]}"}))
        return 2
    ceiling = json.loads(cal.stdout)["profiles"]["default"]["ceiling"]["rate"]
    rate = args.share * ceiling
    prom = PrometheusClient(state.prometheus_url)
    idle_before = kv_usage(prom)
    stats, stop = TrafficStats(), threading.Event()
    duration = args.minutes * 60
    thread = threading.Thread(target=lambda: asyncio.run(run_traffic(
        state.api_url, state.model_name, PROFILES["default"], rate, duration, seed=7, stats=stats, stop=stop)))
    began = time.monotonic()
    thread.start()
    samples, after_warm_up = [], None
    try:
        while thread.is_alive():
            thread.join(SAMPLE_S)
            t = time.monotonic() - began
            figures = replica_figures(state)
            samples.append({"t_s": round(t), "replicas": figures, "kv_usage": kv_usage(prom)})
            if after_warm_up is None and t >= WARM_UP_S:
                after_warm_up = figures
    finally:
        stop.set()
        thread.join()
    time.sleep(30.0)  # the last requests' blocks are freed and scraped: KV usage at rest again
    idle_after = kv_usage(prom)
    prom.close()
    end = samples[-1]["replicas"] if samples else {}
    growth = {rid: {"rss_mib": [after_warm_up[rid]["rss_mib"], f["rss_mib"]],
                    "growth_pct": round(100 * (f["rss_mib"] / after_warm_up[rid]["rss_mib"] - 1), 2),
                    "fds": [after_warm_up[rid]["fds"], f["fds"]], "threads": [after_warm_up[rid]["threads"], f["threads"]]}
              for rid, f in end.items() if after_warm_up and rid in after_warm_up}
    summary = stats.summary()
    errors = {s: n for s, n in summary["statuses"].items() if s != "200"}
    out = {"rate_rps": round(rate, 3), "ceiling_rps": ceiling, "minutes": args.minutes, "sent": summary["sent"],
           "errors": errors, "replicas": growth, "kv_usage_idle": {"before": idle_before, "after": idle_after},
           "replaced_replicas": sorted(set(after_warm_up or {}) ^ set(end)), "samples": samples}
    print(json.dumps(out, indent=1))
    ok = not errors and all(g["growth_pct"] <= 5 and g["fds"][1] <= g["fds"][0] and g["threads"][1] <= g["threads"][0]
                            for g in growth.values()) and (idle_after or 0) <= (idle_before or 0) + 1e-6
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
