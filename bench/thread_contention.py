"""What running more compute threads than the machine has costs two engines side by side, by OpenMP wait policy.

    .venv/bin/python bench/thread_contention.py [--waves 12] [--gap-s 0.6] [--reps 2] > thread_contention.json

Two processes, each one engine of tpot-regression's setup (the shipped draft, 3 tokens a step), run side by side
as two replicas of the fleet do: each sends waves of the default profile's requests (greedy, four at a time) with
an idle gap drawn from the same seeded exponential between waves, so the engines overlap for part of the time, as
they do under a drill's traffic. Setups, in turn within each rep (the machine is shared: compare within a rep):
one thread each (the healthy fleet), as many threads each as this process may use CPUs (`torch_threads: all`)
under libgomp's default wait (it spins about 3 ms after each parallel region before it sleeps, unless it knows
it has more threads than CPUs: it counts only its own process's), and the same under `OMP_WAIT_POLICY=ACTIVE`
(spin for minutes: what tuning guides for a dedicated benchmark box advise) and `PASSIVE` (sleep at once).

Per setup and process: the median over waves of wall seconds per output token after each request's first, which
is what the TPOT page reads per request. One JSON line per setup, process and rep, then the ratios to healthy.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUPS = {  # name: (threads, OMP_WAIT_POLICY or None)
    "healthy (1 thread each)": (1, None),
    "all CPUs each, default wait": ("all", None),
    "all CPUs each, OMP_WAIT_POLICY=ACTIVE": ("all", "ACTIVE"),
    "all CPUs each, OMP_WAIT_POLICY=PASSIVE": ("all", "PASSIVE"),
}


def engine(threads: int, waves: int, gap_s: float, seed: int) -> dict:
    """One replica's share of the bench, run in a process of its own (the wait policy is read at start)."""
    sys.path.insert(0, str(REPO))
    from incidents.profiles import PROFILES
    from services.engine.llm import LLM
    from services.engine.sampling_params import SamplingParams
    from services.model.paths import WEIGHTS_DIR

    llm = LLM(str(WEIGHTS_DIR / "target"), torch_threads=threads, speculative_model=str(WEIGHTS_DIR / "draft"),
              num_speculative_tokens=3)
    rng = random.Random(seed)
    sampled = [PROFILES["default"].sample(rng) for _ in range(4 * (waves + 1))]
    prompts = [r.prompt for r in sampled]
    params = [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, ignore_eos=r.ignore_eos) for r in sampled]
    llm.generate(prompts[:4], params[:4])  # warm-up
    per_token, busy, t_start = [], 0.0, time.monotonic()
    for w in range(1, waves + 1):
        t0 = time.monotonic()
        outputs = llm.generate(prompts[4 * w:4 * w + 4], params[4 * w:4 * w + 4])
        wall = time.monotonic() - t0
        busy += wall
        per_token.append(wall / max(1, sum(len(o.outputs[0].token_ids) - 1 for o in outputs)))
        time.sleep(rng.expovariate(1 / gap_s))  # the traffic's idle time between waves, not a mechanism
    return {"threads": threads, "s_per_token_p50": round(statistics.median(per_token), 5),
            "busy_share": round(busy / (time.monotonic() - t_start), 3)}


def run_pair(threads, policy, waves: int, gap_s: float, rep: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    n = len(os.sched_getaffinity(0)) if threads == "all" else threads
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(n), str(waves), str(gap_s), str(rep * 10 + i)],
                              env=env, stdout=subprocess.PIPE, text=True) for i in range(2)]
    rows = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a child engine failed (exit {p.returncode})")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        threads, waves, gap_s, seed = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(engine(threads, waves, gap_s, seed)))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--waves", type=int, default=12)
    ap.add_argument("--gap-s", type=float, default=0.6)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if args.waves < 2 or args.reps < 1 or args.gap_s < 0:
        ap.error("--waves must be >= 2, --reps >= 1 and --gap-s >= 0")
    ratios: dict[str, list[float]] = {name: [] for name in SETUPS}
    for rep in range(args.reps):
        healthy = None
        for name, (threads, policy) in SETUPS.items():
            rows = run_pair(threads, policy, args.waves, args.gap_s, rep)
            for i, row in enumerate(rows):
                print(json.dumps({"rep": rep, "setup": name, "process": i, **row}), flush=True)
            mean = statistics.fmean(r["s_per_token_p50"] for r in rows)
            healthy = healthy or mean
            ratios[name].append(round(mean / healthy, 2))
    print(json.dumps({"summary": "median s per output token over the healthy setup's, per rep", "ratios": ratios}))


if __name__ == "__main__":
    main()
