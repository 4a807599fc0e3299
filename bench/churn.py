"""Churn: drills in a row, each ended a way drawn at random at a random moment; after each, nothing is left.

    .venv/bin/python bench/churn.py --drills 50 > churn.jsonl      # about 2-3 minutes a drill here

Each drill is `sandbox drill --random --headless --duration 240 --json` at a fresh seed, in its own
process group, with its own runs directory. At a moment drawn from [5 s, 200 s] (so some land in the
stack's start, some mid-injection or mid-rollout, some after the page) it is ended one of the ways a
drill ends in the field:

    sigint         one Ctrl-C
    sigint-twice   Ctrl-C, then another 2 s later (during the teardown: it must go on)
    sigterm        SIGTERM (a supervisor, `kill`)
    sighup         SIGHUP (the terminal closed, the SSH session dropped)
    closed-stdout  the reader of its standard output goes away (`| tee` ended by Ctrl-C)
    sigkill        SIGKILL, then `sandbox down` (nothing of the drill runs its teardown)
    duration       nothing: the drill runs its --duration and ends by itself

Then it checks what was left: processes of Ray, Prometheus, the canary or the sandbox CLI; the
sandbox's cgroups (CPU quotas); a fault journal left undone (faults/journal.py); its listening ports; containers (when a Docker engine answers);
and that the run's `run.json` names how it ended; a drill still running TEARDOWN_S after a signal that asks it to
stop counts as not clean ("ignored"). One JSON line per drill, then a summary line.
Not a test: it runs for hours (the suite keeps one representative of each ending).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from faults.journal import SUFFIX as JOURNAL_SUFFIX
from services.serve.cgroup_cpu import cpu_mounts
from services.stack.ports import listening_ports
from services.stack.settings import SandboxConfig

ENDINGS = ("sigint", "sigint-twice", "sigterm", "sighup", "closed-stdout", "sigkill", "duration")
MARKS = ("raylet", "gcs_server", "ray::", "dashboard/dashboard.py", "dashboard/agent.py", "default_worker.py",
         "sandbox.canary", "sandbox.cli", "prometheus --config.file")
DURATION_S = 240
ENDED_BY_ITSELF_S = 600  # a drill that outlives this after its ending is counted as hung
# A drill asked to stop by a signal must be gone within its teardown; one still running after this ignored it.
TEARDOWN_S = 120
STOPPING = ("sigint", "sigint-twice", "sigterm", "sighup")  # endings that ask the drill to stop now


def leftovers(cfg: SandboxConfig) -> dict:
    """What of a sandbox is still here: processes, cgroups, listening ports, containers."""
    procs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd and state != "Z" and any(m in cmd for m in MARKS) and "bench/churn.py" not in cmd:
            procs.append(f"{entry.name} {cmd[:120]}")
    cgroups = sorted(str(p) for mount in cpu_mounts() for p in mount.path.glob("sandbox-*"))
    journals = [p.name for p in Path(cfg.keys_dir).glob(f"*{JOURNAL_SUFFIX}")]  # a fault left undone
    ports = {getattr(cfg, n) for n in ("ray_port", "dashboard_port", "metrics_export_port", "api_port",
                                        "prometheus_port")}
    listening = sorted(ports & listening_ports())
    return {"processes": procs, "cgroups": cgroups, "journals": journals, "ports": listening,
            "containers": _containers()}


def _containers() -> list[str]:
    try:
        done = subprocess.run(["docker", "ps", "-q", "--filter", "name=sandbox"], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 else []


def one_drill(i: int, rng: random.Random, work: Path, cfg: SandboxConfig) -> dict:
    ending, at_s, seed = rng.choice(ENDINGS), round(rng.uniform(5, 200), 1), rng.randrange(2**31)
    runs = work / f"runs-{i:03d}"
    env = dict(os.environ, SANDBOX_RUNS=str(runs))
    argv = [sys.executable, "-m", "sandbox.cli", "drill", "--random", "--seed", str(seed), "--headless",
            "--duration", str(DURATION_S), "--json"]
    with open(work / f"drill-{i:03d}.log", "wb") as log:
        out = subprocess.PIPE if ending == "closed-stdout" else log
        began = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=log, start_new_session=True,
                                preexec_fn=_signals_as_in_a_terminal)
        record = {"drill": i, "seed": seed, "ending": ending, "at_s": at_s}
        ended_at = None
        if ending != "duration":
            while proc.poll() is None and time.monotonic() - began < at_s:
                time.sleep(0.2)
            if proc.poll() is None:
                ended_at = time.monotonic()
                _end(proc, ending)
        try:
            proc.wait(timeout=ENDED_BY_ITSELF_S)
        except subprocess.TimeoutExpired:
            record["hung"] = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    record["exit"] = proc.returncode
    if ended_at is not None:
        record["ended_s"] = round(time.monotonic() - ended_at, 1)  # from the ending to the drill's exit
        record["ignored"] = ending in STOPPING and record["ended_s"] > TEARDOWN_S
    if ending == "sigkill" or record.get("hung"):
        down = subprocess.run([sys.executable, "-m", "sandbox.cli", "down"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        record["down_exit"] = down.returncode
    record["seconds"] = round(time.monotonic() - began, 1)
    run_files = sorted(runs.glob("*/run.json"))
    statuses = [json.loads(p.read_text()).get("status") for p in run_files]
    record["run_status"] = statuses[-1] if statuses else None  # None: it ended before a run began
    record["left"] = leftovers(cfg)
    record["clean"] = (not any(record["left"].values()) and record["run_status"] != "running"
                       and not record.get("ignored"))
    return record


def _signals_as_in_a_terminal() -> None:
    """In the drill's process, before exec: SIGINT as a terminal delivers it.

    A shell starts a background job (`nohup ... &`, a CI runner) with SIGINT ignored, exec keeps an ignored
    signal ignored, and Python then installs no KeyboardInterrupt handler: a drill run so would shrug off
    every Ctrl-C this bench sends and the "sigint" endings would test nothing (they did, until 2026-12-06).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _end(proc: subprocess.Popen, ending: str) -> None:
    if ending == "sigint-twice":
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(2.0)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    elif ending == "closed-stdout":
        proc.stdout.close()
    else:
        sig = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP,
               "sigkill": signal.SIGKILL}[ending]
        os.killpg(proc.pid, sig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drills", type=int, default=50, help="how many drills in a row (default 50)")
    ap.add_argument("--seed", type=int, default=None, help="the draw of endings and moments (default: random)")
    args = ap.parse_args()
    if args.drills < 1:
        ap.error("--drills must be at least 1")
    cfg = SandboxConfig.from_env()
    before = leftovers(cfg)
    if any(before.values()):
        print(json.dumps({"error": "a sandbox is running already: `sandbox down` first", "left": before}))
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="churn-"))
    counts: dict = {"seed": seed, "work": str(work), "drills": 0, "clean": 0, "by_ending": {}}
    for i in range(args.drills):
        record = one_drill(i, rng, work, cfg)
        print(json.dumps(record), flush=True)
        counts["drills"] += 1
        counts["clean"] += record["clean"]
        by = counts["by_ending"].setdefault(record["ending"], {"drills": 0, "clean": 0})
        by["drills"] += 1
        by["clean"] += record["clean"]
        if not record["clean"]:  # the next drill would start on what this one left
            subprocess.run([sys.executable, "-m", "sandbox.cli", "down"], cwd=REPO, capture_output=True,
                           timeout=300, check=False)
    print(json.dumps({"summary": counts}))
    return 0 if counts["clean"] == counts["drills"] else 1


if __name__ == "__main__":
    sys.exit(main())
