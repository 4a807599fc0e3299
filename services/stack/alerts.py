"""Alert rules and alerts: where the rules live, what is pending or firing now, and when an alert fired.

The rules are data (dashboards/rules/*.rules.yml). `install_rules` copies them
into a run's directory, so the run keeps the rules it was judged by. The
rest reads a running (or replayed) Prometheus:

    active_alerts   pending and firing alerts now (/api/v1/alerts)
    first_firing    when alert X first fired in a window (the ALERTS series)
    fired_between   every alert that fired in a window, with its first time
    loaded_alerts   the alerting rules Prometheus has loaded (/api/v1/rules)
    rule_problems   rules whose last evaluation failed

and the rules themselves: `alert_rules` (name -> rule), `alert_for_seconds` (its `for:`).
"""
from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from services.stack.prometheus import PrometheusClient
from services.stack.settings import REPO_ROOT

RULES_DIR = REPO_ROOT / "dashboards" / "rules"
THRESHOLD_GROUP = "thresholds"  # recording rules whose value is a constant an alert compares against


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.rules.yml"))


def install_rules(dest_dir: Path, rules_dir: Path = RULES_DIR) -> list[Path]:
    """Copy the rule files into dest_dir; returns the copies (what Prometheus is given)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(path, dest_dir / path.name)) for path in rule_files(rules_dir)]


def alert_names(paths: list[Path] | None = None) -> list[str]:
    """Every alert the rule files define, in file order."""
    return [r["alert"] for g in _groups(paths) for r in g.get("rules", []) if "alert" in r]


def alert_rules(paths: list[Path] | None = None) -> dict[str, dict]:
    """{alert name: its rule as written (expr, for, labels, annotations)}, in file order."""
    return {r["alert"]: r for g in _groups(paths) for r in g.get("rules", []) if "alert" in r}


def recorded_exprs(paths: list[Path] | None = None) -> dict[str, str]:
    """{recorded series name: the expression that records it}, for every recording rule."""
    return {r["record"]: str(r["expr"]) for g in _groups(paths) for r in g.get("rules", []) if "record" in r}


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_DURATION_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def alert_for_seconds(name: str, paths: list[Path] | None = None) -> float:
    """How long alert `name`'s condition must hold before it fires (its `for:`, 0 when it has none)."""
    rules = alert_rules(paths)
    if name not in rules:
        raise ValueError(f"no alert {name!r} in the rule files; they define {', '.join(rules)}")
    text = str(rules[name].get("for", "0s"))
    if not re.fullmatch(f"(?:{_DURATION.pattern})+", text):
        raise ValueError(f"alert {name!r}: `for: {text}` is not a Prometheus duration (e.g. 20s, 1m30s)")
    return float(sum(int(n) * _DURATION_S[u] for n, u in _DURATION.findall(text)))


def longest_window_s(paths: list[Path] | None = None) -> float:
    """The longest range over a latency histogram any rule reads (`_bucket[1m]` -> 60): how long the
    latencies of requests from before stay in what the alerts see."""
    ranges = [int(n) * {"s": 1, "m": 60, "h": 3600}[u] for g in _groups(paths) for r in g.get("rules", [])
              for n, u in re.findall(r"_bucket\[(\d+)([smh])[\]:]", str(r.get("expr", "")))]
    return float(max(ranges, default=0))


def thresholds(paths: list[Path] | None = None) -> dict[str, float]:
    """The constants of the `thresholds` group: {recorded name: value}."""
    out = {}
    for group in _groups(paths):
        if group.get("name") == THRESHOLD_GROUP:
            for rule in group.get("rules", []):
                m = re.fullmatch(r"\s*vector\(\s*([-+0-9.eE]+)\s*\)\s*", str(rule["expr"]))
                if not m:
                    raise ValueError(f"threshold {rule.get('record')!r} must be `vector(<number>)`, "
                                     f"got {rule['expr']!r}")
                out[rule["record"]] = float(m.group(1))
    return out


def _groups(paths: list[Path] | None) -> list[dict]:
    groups = []
    for path in rule_files() if paths is None else paths:
        groups += yaml.safe_load(Path(path).read_text()).get("groups", [])
    return groups


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # "pending" | "firing"
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    active_at: float | None = None  # unix time it became pending
    value: float | None = None  # the expression's value at the last evaluation
    active_since: str | None = None  # active_at as Prometheus wrote it (RFC 3339, nanoseconds)


def active_alerts(client: PrometheusClient) -> list[Alert]:
    """Pending and firing alerts now, as Prometheus' rule manager sees them."""
    return [Alert(r["labels"].get("alertname", "?"), r["state"], r["labels"], r.get("annotations", {}),
                  parse_time(r.get("activeAt")), _number(r.get("value")), r.get("activeAt"))
            for r in client.alerts()]


def firing(client: PrometheusClient) -> list[Alert]:
    return [a for a in active_alerts(client) if a.state == "firing"]


def first_firing(client: PrometheusClient, alert: str, start: float, end: float, step_s: float = 1.0) -> float | None:
    """Unix time (to step_s) alert X was first seen firing in [start, end]; None if it never was."""
    return fired_between(client, start, end, step_s, alert).get(alert)


def fired_between(client: PrometheusClient, start: float, end: float, step_s: float = 1.0,
                  alert: str | None = None) -> dict[str, float]:
    """{alert name: first unix time seen firing} over [start, end], from the ALERTS series."""
    selector = 'alertstate="firing"' + (f',alertname="{alert}"' if alert else "")
    rows = client.query_range(f"max by (alertname) (ALERTS{{{selector}}})", start, end, step_s)
    return {r["metric"]["alertname"]: float(r["values"][0][0]) for r in rows if r["values"]}


def loaded_alerts(client: PrometheusClient) -> list[str]:
    """The alerting rules Prometheus has loaded (grouped as it lists them, not in file order)."""
    return [r["name"] for g in client.rule_groups() for r in g["rules"]
            if r.get("type") == "alerting"]


def rule_problems(client: PrometheusClient) -> list[str]:
    """Rules whose last evaluation failed, as 'group/rule: error' (empty when every rule is healthy)."""
    out = []
    for group in client.rule_groups():
        for rule in group["rules"]:
            if rule.get("health") not in ("ok", "unknown"):
                out.append(f"{group['name']}/{rule['name']}: {rule.get('lastError', rule.get('health'))}")
    return out


def parse_time(text: str | None) -> float | None:
    """Prometheus' RFC 3339 timestamps carry nanoseconds; Python's parser takes up to microseconds."""
    if not text:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
