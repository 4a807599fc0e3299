"""Start the canary as a process of its own (what a drill does), announced before this returns.

It runs in its own session, so a Ctrl-C meant for the caller does not kill it
mid-probe; `sandbox down` stops it by the pid in its target file name, or the
caller does with `stop`.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sandbox.canary.endpoint import target_file
from services.stack.state import stop_pid


def spawn(api_url: str, model: str, targets_dir: Path, log_file: Path, *, first_port: int = 9450,
          interval_s: float | None = None, seed: int = 0, timeout_s: float = 15.0,
          warm_up: bool = True) -> subprocess.Popen:
    args = ["--port", str(first_port), "--seed", str(seed), *(() if warm_up else ("--no-warm-up",))]
    if interval_s is not None:
        args += ["--interval", str(interval_s)]
    proc = launch(api_url, model, targets_dir, log_file, *args)
    announced = target_file(targets_dir, proc.pid)
    deadline = time.monotonic() + timeout_s
    while not announced.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the canary exited with {proc.returncode}; see {log_file}")
        if time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"the canary did not announce its metrics endpoint within {timeout_s:.0f}s; "
                               f"see {log_file}")
        time.sleep(0.05)
    return proc


def launch(api_url: str, model: str, targets_dir: Path, log_file: Path, *args: str) -> subprocess.Popen:
    """The canary in a session of its own (args: more of its options), not waited for: a drill goes on
    while it announces itself. It ends with this process: `sandbox down` finds a canary by its target file,
    which one whose drill was SIGKILLed in its first seconds had not written yet."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "sandbox.canary", "--api", api_url, "--model", model,
                                 "--targets-dir", str(targets_dir), "--parent-pid", str(os.getpid()), *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def halt(proc: subprocess.Popen, targets_dir: Path | None = None, timeout_s: float = 10.0) -> None:
    """`stop`, without raising for a canary that takes more than 5 s to be reaped; with `targets_dir`, its
    target file goes too. A canary killed after its grace period leaves the file behind, and Prometheus
    then counts a target that is down: a later rollout waiting for every target to be scraped waited
    180 s and failed the drill's clean-up (tpot-regression, after a calibration's canary)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        stop(proc, timeout_s)
    if targets_dir is not None and proc.poll() is not None:
        target_file(targets_dir, proc.pid).unlink(missing_ok=True)


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM (it removes its target file), SIGKILL after timeout_s; reaps it."""
    stop_pid(proc.pid, timeout_s)
    proc.wait(timeout=5)


def probing(proc: subprocess.Popen, targets_dir: Path, timeout_s: float = 60.0) -> bool:
    """Wait until the canary has finished its warm-up (its references, one request at a time) and sends
    its steady probes, read from its own metrics endpoint: its first accuracy probe comes after the
    warm-up. False if it has not within timeout_s, or has exited.

    A drill's traffic runs beside the steady canary (about 3 requests/s, in bursts of 4); a measurement
    that starts during the warm-up sees a lighter stack first and a busier one later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            address = json.loads(target_file(targets_dir, proc.pid).read_text())[0]["targets"][0]
            text = httpx.get(f"http://{address}/metrics", timeout=2.0).text
        except (OSError, ValueError, KeyError, IndexError, httpx.HTTPError):
            text = ""
        for family in text_string_to_metric_families(text):
            if family.name == "sandbox_canary_requests" and any(
                    s.labels.get("probe") == "accuracy" and s.value > 0 for s in family.samples):
                return True
        time.sleep(0.2)
    return False
