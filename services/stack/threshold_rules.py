"""A running stack's thresholds file: the defaults with calibrated values in their place, loaded live.

The alerts read their thresholds from the `sandbox:threshold:*` recording rules of
`thresholds.rules.yml` (dashboards/rules). A calibrated stack gets its own copy in its run
directory's rules (what the run is judged by, kept with it), written from the defaults with
the calibrated values substituted, and Prometheus reloads it on SIGHUP (its documented
reload signal; the HTTP reload endpoint needs the lifecycle API, which a candidate could
use too). `install` returns once Prometheus evaluates the new values.
"""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import yaml

from services.stack.alerts import RULES_DIR, THRESHOLD_GROUP
from services.stack.prometheus import PrometheusClient

THRESHOLDS_FILE = "thresholds.rules.yml"


def render(values: dict[str, float], note: str, defaults: Path = RULES_DIR / THRESHOLDS_FILE) -> str:
    """The thresholds file with `values` (recorded name -> number) in place of the defaults."""
    data = yaml.safe_load(Path(defaults).read_text())
    known = set()
    for group in data["groups"]:
        if group.get("name") != THRESHOLD_GROUP:
            continue
        for rule in group["rules"]:
            known.add(rule["record"])
            if rule["record"] in values:
                rule["expr"] = f"vector({float(values[rule['record']]):g})"
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"no such threshold in {defaults}: {', '.join(unknown)}")
    header = "".join(f"# {line}\n" for line in note.splitlines())
    return header + yaml.safe_dump(data, sort_keys=False)


def loaded(client: PrometheusClient) -> dict[str, str]:
    """The threshold rules Prometheus evaluates now: {recorded name: expression}."""
    return {r["name"]: r.get("query", "") for g in client.rule_groups() if g["name"] == THRESHOLD_GROUP
            for r in g["rules"]}


def install(rules_dir: Path, prometheus_pid: int, client: PrometheusClient, values: dict[str, float], note: str,
            timeout_s: float = 20.0) -> Path:
    """Write the run's thresholds file and have Prometheus load it; raises RuntimeError if it does not."""
    path = Path(rules_dir) / THRESHOLDS_FILE
    if not path.exists():  # Prometheus reads the rule files its config names, and this is not one of them
        raise RuntimeError(f"this stack's Prometheus has no {THRESHOLDS_FILE} to replace ({rules_dir}): it was "
                           "started by an older version of the sandbox; `sandbox down`, then start it again")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(values, note))
    tmp.replace(path)
    os.kill(prometheus_pid, signal.SIGHUP)
    want = {name: float(v) for name, v in values.items()}
    deadline = time.monotonic() + timeout_s
    while True:
        now = {name: _constant(expr) for name, expr in loaded(client).items()}
        if all(_close(now.get(name), v) for name, v in want.items()):
            return path
        if time.monotonic() > deadline:
            raise RuntimeError(f"Prometheus did not load {path} within {timeout_s:.0f}s (it evaluates {now})")
        time.sleep(0.2)


def _constant(expr: str) -> float | None:
    # Prometheus prints an unset threshold (+Inf: nothing exceeds it) back as `vector(+Inf)`
    m = re.fullmatch(r"\s*vector\(\s*([-+]?(?:inf|[0-9.eE+-]+))\s*\)\s*", expr or "", re.IGNORECASE)
    return float(m.group(1)) if m else None


def _close(a: float | None, b: float) -> bool:
    return a is not None and (a == b or abs(a - b) <= 1e-9 * max(1.0, abs(b)))
