"""Serving benchmark: cold start, metric propagation, three request rates, metrics overhead. Prints JSON.

    python bench/serving.py --json                      # about 4 minutes on 2 CPU cores
    python bench/serving.py --rates 1,2,4 --duration 30 --replicas 2

It brings its own stack up (own ports and SANDBOX_HOME, like the tests) and
down again. What it measures:
  cold_start_s       `sandbox up` until every target is scraped and every replica's metrics stored
  propagation_s      a request finishes on a replica -> its counter increment is queryable in Prometheus
  rates              open-loop Poisson traffic (profile `default`): client-side throughput, TTFT, ITL
  metrics_overhead   closed-loop saturation with the replicas' engine metrics on vs off
                     (knob export_metrics, applied in place; Ray Serve's own metrics stay on)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from incidents.profiles import PROFILES, SampledRequest
from sandbox.traffic.generator import TrafficStats, run_traffic, send_request
from services.stack.deployer import deploy_changes
from services.stack.prometheus import PrometheusClient
from services.stack.settings import SandboxConfig
from services.stack.stack import Stack

PORTS = {"ray_port": 6399, "dashboard_port": 8285, "metrics_export_port": 8099, "api_port": 8019,
         "prometheus_port": 9109, "traffic_port": 9419}


def propagation(state, trials: int) -> dict:
    import httpx

    prom = PrometheusClient(state.prometheus_url)
    delays = []
    try:
        for i in range(trials):
            before = prom.value("sum(vllm:request_success_total)") or 0
            httpx.post(f"{state.api_url}/v1/completions", timeout=60,
                       json={"model": state.model_name, "prompt": f"add: {i}+1 -> ", "max_tokens": 2})
            done = time.monotonic()
            while (prom.value("sum(vllm:request_success_total)") or 0) < before + 1:
                if time.monotonic() - done > 30:
                    break
                time.sleep(0.05)
            delays.append(time.monotonic() - done)
            time.sleep(0.3)
    finally:
        prom.close()
    return {"p50": round(statistics.median(delays), 2), "max": round(max(delays), 2), "trials": trials}


async def closed_loop(state, concurrency: int, duration_s: float) -> float:
    """Output tokens/s with `concurrency` clients sending back to back."""
    import httpx

    req = SampledRequest(task="copy", chat=False, system=None, user="copy: abcdefgh -> ", max_tokens=32,
                         ignore_eos=True, stream=True, temperature=0.0)
    tokens = 0
    async with httpx.AsyncClient(base_url=state.api_url, timeout=120) as client:
        end = time.monotonic() + duration_s

        async def worker():
            nonlocal tokens
            while time.monotonic() < end:
                result = await send_request(client, req, state.model_name)
                tokens += result.completion_tokens
        t0 = time.monotonic()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return tokens / (time.monotonic() - t0)


def overhead(cfg, state, concurrency: int, duration_s: float, rounds: int) -> dict:
    """Runs in ABBA order (on, off, off, on) per round, so a drift in machine load cancels out."""
    runs = {"on": [], "off": []}
    asyncio.run(closed_loop(state, concurrency, 5))  # warm up
    for _ in range(rounds):
        for mode in ("on", "off", "off", "on"):
            deploy_changes(cfg, state, [f"knobs.export_metrics={'true' if mode == 'on' else 'false'}"], None, 120)
            time.sleep(1)
            runs[mode].append(asyncio.run(closed_loop(state, concurrency, duration_s)))
    deploy_changes(cfg, state, ["knobs.export_metrics=true"], None, 120)
    on, off = statistics.mean(runs["on"]), statistics.mean(runs["off"])
    pairs = [(b - a) / b for a, b in zip(runs["on"], runs["off"])]
    return {"tokens_per_s_on": round(on, 1), "tokens_per_s_off": round(off, 1),
            "overhead_pct": round(100 * (off - on) / off, 2),
            "paired_overhead_pct_stdev": round(100 * statistics.stdev(pairs), 2) if len(pairs) > 1 else None,
            "runs": {k: [round(v, 1) for v in vs] for k, vs in runs.items()},
            "concurrency": concurrency, "seconds_per_run": duration_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1,2,4", help="request rates (requests/s), comma separated")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of traffic per rate")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--overhead-rounds", type=int, default=2, help="ABBA rounds of on/off; 0 skips them")
    ap.add_argument("--overhead-seconds", type=float, default=15.0)
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    args = ap.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    cfg = SandboxConfig(home=home, **PORTS)
    stack = Stack(cfg)
    result: dict = {"replicas": args.replicas, "machine": "cpu"}
    t0 = time.perf_counter()
    state = stack.up(replicas=args.replicas)
    try:
        result["cold_start_s"] = round(time.perf_counter() - t0, 2)
        result["propagation_s"] = propagation(state, trials=5)
        result["rates"] = []
        for rate in [float(r) for r in args.rates.split(",")]:
            stats: TrafficStats = asyncio.run(run_traffic(state.api_url, state.model_name, PROFILES["default"],
                                                          rate, args.duration, seed=7))
            s = stats.summary()
            result["rates"].append({"rate": rate, "ok": s["ok"], "errors": s["finished"] - s["ok"],
                                    "request_rate": s["request_rate"],
                                    "output_tokens_per_s": s["output_tokens_per_s"],
                                    "ttft_ms": s["ttft_ms"], "itl_ms": s["itl_ms"], "e2e_ms": s["e2e_ms"]})
            if not args.json:
                print(json.dumps(result["rates"][-1]), file=sys.stderr)
        if args.overhead_rounds:
            result["metrics_overhead"] = overhead(cfg, state, 16, args.overhead_seconds, args.overhead_rounds)
    finally:
        stack.down()
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
