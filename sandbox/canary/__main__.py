"""`python -m sandbox.canary`: probe a running OpenAI API until stopped; print a JSON summary at the end.

    python -m sandbox.canary --api http://127.0.0.1:8000 --model sandbox-llama \\
        --targets-dir runs/sandbox/<run>/targets [--port 9450] [--interval 0.5] [--seed 0]

Without --api/--model/--targets-dir, the running sandbox's state file supplies
them. SIGTERM or SIGINT (what `sandbox down` and Ctrl-C send) stop it cleanly:
the metrics endpoint closes and its target file is removed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from sandbox.canary.endpoint import MetricsEndpoint
from sandbox.canary.metrics import CanaryMetrics
from sandbox.canary.prober import CanaryProber, ProberConfig
from services.stack.settings import SandboxConfig
from services.stack.state import NoStackError, StackState


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sandbox.canary", description=__doc__.split("\n")[0])
    p.add_argument("--api", help="the OpenAI API's base URL (default: the running sandbox's)")
    p.add_argument("--model", help="model name to ask for (default: the running sandbox's)")
    p.add_argument("--targets-dir", type=Path,
                   help="file_sd directory to announce the metrics endpoint in (default: the running sandbox's)")
    p.add_argument("--host", default="127.0.0.1", help="address the metrics endpoint binds")
    p.add_argument("--port", type=int, default=9450, help="first port tried for the metrics endpoint")
    p.add_argument("--interval", type=float, default=ProberConfig.interval_s, help="seconds between probe slots")
    p.add_argument("--burst", type=int, default=ProberConfig.burst_size, help="identical requests per burst")
    p.add_argument("--seed", type=int, default=0, help="order of the accuracy prompts, seeds of seeded probes")
    p.add_argument("--no-warm-up", action="store_true",
                   help="steady probes from the start, without asking every consistency key alone first "
                        "(its first answers become the references; for a calibration's load)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: never)")
    p.add_argument("--parent-pid", type=int, default=None,
                   help="end when this process (the drill that started it) is gone: a drill killed outright "
                        "(SIGKILL) must not leave its canary probing a stack nobody watches")
    p.add_argument("--linger", type=float, default=0.0,
                   help="seconds the endpoint stays up after the last probe, so the final counts are scraped")
    return p


def _from_running_sandbox(args: argparse.Namespace) -> None:
    if args.api and args.model and args.targets_dir:
        return

    try:
        state = StackState.load(SandboxConfig.from_env().state_file)
    except (NoStackError, ValueError) as e:
        raise SystemExit(f"error: pass --api, --model and --targets-dir, or start a sandbox first ({e})")
    args.api = args.api or state.api_url
    args.model = args.model or state.model_name
    args.targets_dir = args.targets_dir or state.targets_dir


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _orphaned(parent_pid: int | None) -> bool:
    """The process that started this one is gone (this one was handed to init or a subreaper)."""
    return parent_pid is not None and os.getppid() != parent_pid


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if _orphaned(parent_pid):
            stop.set()
            return
        await asyncio.sleep(0.5)


async def _probe(prober: CanaryProber, duration_s: float | None, parent_pid: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid is not None else None
    try:
        await prober.run(stop, duration_s)
    finally:
        if watcher is not None:
            watcher.cancel()


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # until the probe loop handles it: stop as on Ctrl-C
    args = _parser().parse_args(argv)
    if _orphaned(args.parent_pid):  # its drill died while it started: announce nothing, probe nothing
        return 0
    _from_running_sandbox(args)
    try:
        config = ProberConfig(interval_s=args.interval, burst_size=args.burst, seed=args.seed,
                              warm_up=not args.no_warm_up)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    metrics = CanaryMetrics()
    prober = CanaryProber(args.api, args.model, metrics, config)
    endpoint = MetricsEndpoint(metrics.registry, args.host, args.port, args.targets_dir, linger_s=args.linger)
    try:
        asyncio.run(_probe(prober, args.duration, args.parent_pid))
    except KeyboardInterrupt:
        pass  # stopped before the probe loop could take the signal
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # already shutting down: let it finish
            signal.signal(sig, signal.SIG_IGN)
        endpoint.close()
    print(json.dumps({"endpoint": endpoint.url, "slots": prober.slots, "skipped": prober.skipped,
                      "references": len(prober.book), "nominal_requests_per_s": round(config.requests_per_s, 3),
                      **metrics.summary()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
