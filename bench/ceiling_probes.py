"""Ceiling probes back to back on a running stack: how much one window of the capacity check's closed loop
varies, and whether the first one on a fresh stack reads low (sandbox/calibration/drift.py: TOLERANCE).

    .venv/bin/sandbox up && .venv/bin/python bench/ceiling_probes.py --probes 4 --warm 3 > probes.json

Each probe is the calibration's ceiling phase of the `default` profile (the engines' whole batch, a closed
loop beside the unscraped canary, as `sandbox calibrate` and a drill's capacity check run it). `--warm S`
runs S seconds of the same loop before the first probe and drops it. Prints one JSON object: each probe's
completed requests per second, its TTFT median and its wall time, and in sum the mean, the relative
standard deviation and the first probe over the mean of the others. Not a test.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incidents.profiles import get_profile  # noqa: E402
from sandbox.calibration.calibrator import Calibrator, engine_batch  # noqa: E402
from sandbox.calibration.sweep import Sweeper  # noqa: E402
from sandbox.calibration.sweep_point import SweepConfig  # noqa: E402
from services.stack.settings import SandboxConfig  # noqa: E402
from services.stack.state import NoStackError, StackState  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=4, help="probes back to back (default 4)")
    ap.add_argument("--warm", type=float, default=0.0, help="seconds of the same loop dropped first (default 0)")
    ap.add_argument("--window", type=float, default=None, help="each probe's window in seconds (default: the sweep's)")
    args = ap.parse_args()
    if args.probes < 2 or args.warm < 0:
        ap.error("--probes must be >= 2 and --warm >= 0")
    try:
        state = StackState.load(SandboxConfig.from_env().state_file)
    except NoStackError as e:
        print(e, file=sys.stderr)
        return 2
    sweep = SweepConfig()
    sweeper = Sweeper(state.api_url, state.model_name, sweep, 0, replicas=state.replicas or 1,
                      batch=engine_batch(state))
    profile = get_profile("default")
    probes = []
    with Calibrator(state, {"bench": "ceiling_probes"}, ["default"], sweep).beside_canary():
        if args.warm:
            sweeper.ceiling(profile, window_s=max(1.0, args.warm))
        for i in range(args.probes):
            t = time.monotonic()
            p = sweeper.ceiling(profile, window_s=args.window)
            probes.append({"i": i, "rate": round(p.rate, 3), "ttft_p50_s": p.ttft_p50_s,
                           "wall_s": round(time.monotonic() - t, 1)})
            print(f"probe {i}: {p.rate:.2f} req/s", file=sys.stderr, flush=True)
    rates = [p["rate"] for p in probes]
    mean = statistics.mean(rates)
    print(json.dumps({"warm_s": args.warm, "window_s": args.window or sweep.ceiling_s, "probes": probes,
                      "mean_rps": round(mean, 3), "relative_sd": round(statistics.stdev(rates) / mean, 4),
                      "first_over_rest": round(rates[0] / statistics.mean(rates[1:]), 3)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
