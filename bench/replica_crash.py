"""A replica's process SIGKILLed under load: does Serve replace it, does traffic recover, does any request hang?

    .venv/bin/sandbox up && .venv/bin/python bench/replica_crash.py --kills 3 > crash.json

Clients (the `openai` client, `--clients` threads, each request with its own `--timeout`, no retries) send
completions back to back. After a warm-up, one LLMServer replica's process is SIGKILLed (what the kernel's
OOM killer sends too: Serve sees the same dead actor), and the bench watches Serve's REST API until a new
replica runs in its place and the clients' requests succeed again. Between kills it waits until the fleet
is whole. It prints one JSON object: per kill, seconds until Serve lists a replacement RUNNING, seconds until
the first and until the last failing request after the kill (counting the requests in flight when it
died: those end after it), and the failures by kind; in sum, every
request's outcome and the longest any request took, against its timeout (a request that outlives its
timeout is a hang; the issue's bar is none). Not a test: tests/serving/test_recovery.py keeps one kill.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.stack.serve_control import ServeControl, running_replicas
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

PROMPTS = ("sort: qwertyuiop -> ", "copy: abcdefgh -> ", "add: 123+45 -> ", "reverse: sandbox -> ")


class Clients:
    """Threads sending one completion after another; every outcome kept with its start and duration."""

    def __init__(self, state: StackState, n: int, timeout_s: float):
        import openai

        self.client = openai.OpenAI(base_url=f"{state.api_url}/v1", api_key="unused", max_retries=0,
                                    timeout=timeout_s)
        self.model, self.n = state.model_name, n
        self.outcomes: list[tuple[float, float, str]] = []  # (started, seconds, "ok" | error kind)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(n)]

    def _loop(self, i: int) -> None:
        k = i
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.client.completions.create(model=self.model, prompt=PROMPTS[k % len(PROMPTS)], max_tokens=24,
                                               temperature=0)
                kind = "ok"
            except Exception as e:  # noqa: BLE001 - the kind is the figure
                kind = f"{type(e).__name__}:{getattr(e, 'status_code', '')}"
            with self._lock:
                self.outcomes.append((t0, time.monotonic() - t0, kind))
            k += 1

    def start(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def stop(self, join_s: float) -> int:
        """Stop, and say how many threads are still inside a request after `join_s` (hung)."""
        self._stop.set()
        deadline = time.monotonic() + join_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self._threads)

    def ended_since(self, t: float) -> list[tuple[float, float, str]]:
        """Outcomes that ended at `t` or later: the requests in flight when a replica died are among them."""
        with self._lock:
            return [o for o in self.outcomes if o[0] + o[1] >= t]


def replicas(ctl: ServeControl, state: StackState) -> list[dict]:
    return running_replicas(ctl.application(state.app_name) or {}, "LLMServer")


def one_kill(ctl: ServeControl, state: StackState, clients: Clients, want: int, settle_s: float) -> dict:
    victim = replicas(ctl, state)[0]
    os.kill(int(victim["pid"]), signal.SIGKILL)
    killed = time.monotonic()
    replaced = None
    while time.monotonic() - killed < 180:
        now = replicas(ctl, state)
        if replaced is None and len(now) == want and victim["pid"] not in {r["pid"] for r in now}:
            replaced = time.monotonic() - killed
        if replaced is not None and time.monotonic() - killed > replaced + settle_s:
            break
        time.sleep(0.5)
    after = [o for o in clients.ended_since(killed) if o[0] + o[1] <= time.monotonic()]
    failed = [o for o in after if o[2] != "ok"]
    return {"victim": victim["replica_id"], "replaced_s": None if replaced is None else round(replaced, 1),
            "requests": len(after), "failed": len(failed),
            "in_flight_at_kill": sum(o[0] < killed for o in after),
            "first_failure_s": round(min(o[0] + o[1] for o in failed) - killed, 1) if failed else None,
            "last_failure_s": round(max(o[0] + o[1] for o in failed) - killed, 1) if failed else None,
            "failures": dict(Counter(o[2] for o in failed))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=3, help="replica processes killed, one after another (default 3)")
    ap.add_argument("--clients", type=int, default=4, help="client threads sending back to back (default 4)")
    ap.add_argument("--timeout", type=float, default=30.0, help="each request's own timeout, s (default 30)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds of traffic after each replacement (default 20)")
    args = ap.parse_args()
    if args.kills < 1 or args.clients < 1 or args.timeout <= 0 or args.settle < 0:
        ap.error("--kills and --clients must be at least 1, --timeout positive, --settle not negative")
    state = StackState.load(SandboxConfig.from_env().state_file)
    ctl = ServeControl(state.dashboard_url, token_file=state.ray_token_file)
    clients = Clients(state, args.clients, args.timeout).start()
    try:
        want = len(replicas(ctl, state))
        time.sleep(args.settle)  # warm-up: the figures before the first kill are the healthy ones
        kills = [one_kill(ctl, state, clients, want, args.settle) for _ in range(args.kills)]
    finally:
        hung_threads = clients.stop(args.timeout + 5)
        ctl.close()
    outcomes = clients.outcomes
    longest = max((o[1] for o in outcomes), default=0.0)
    print(json.dumps({"clients": args.clients, "timeout_s": args.timeout, "kills": kills,
                      "requests": len(outcomes), "ok": sum(o[2] == "ok" for o in outcomes),
                      "failures": dict(Counter(o[2] for o in outcomes if o[2] != "ok")),
                      "longest_request_s": round(longest, 2),
                      "over_timeout": sum(o[1] > args.timeout + 1 for o in outcomes),
                      "hung_at_end": hung_threads}, indent=2))
    return 0 if hung_threads == 0 and all(k["replaced_s"] is not None for k in kills) else 1


if __name__ == "__main__":
    sys.exit(main())
