"""The canary's counters (declared in services/serve/metric_names.py), in a registry of their own."""
from __future__ import annotations

from collections import defaultdict

from prometheus_client import CollectorRegistry, Counter

from sandbox.canary.ledger import LOADS
from sandbox.canary.probes import MODES, task_bands
from services.serve import metric_names as names

UNKNOWN_REPLICA = "unknown"  # an answer without an `x-served-by` header
CHECK_RESULTS = ("correct", "wrong")
COMPARE_RESULTS = ("match", "mismatch")
PROBES = ("accuracy", "consistency")


def _counter(spec: names.MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.record_name, spec.help, list(spec.extra_labels), registry=registry)


class CanaryMetrics:
    """Series are created at 0 before their first count wherever the label values are known in
    advance (every task, band and result; each replica's modes, loads and results as soon as the
    replica first answers), because rate() and increase() cannot see a series' first increment."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.checks = _counter(names.CANARY_CHECKS, self.registry)
        self.consistency = _counter(names.CANARY_CONSISTENCY, self.registry)
        self.requests = _counter(names.CANARY_REQUESTS, self.registry)
        for task, bands in task_bands().items():
            for band in bands:
                for result in CHECK_RESULTS:
                    self.checks.labels(task, band, result)
        for probe in PROBES:
            self.requests.labels(probe, "200")
        self._replicas: set[str] = set()

    def request(self, probe: str, status: str) -> None:
        self.requests.labels(probe, status).inc()

    def checked(self, task: str, length: str, correct: bool) -> None:
        self.checks.labels(task, length, "correct" if correct else "wrong").inc()

    def compared(self, mode: str, load: str, replica: str | None, result: str) -> None:
        replica = replica or UNKNOWN_REPLICA
        if replica not in self._replicas:
            self._replicas.add(replica)
            for m in MODES:
                for lo in LOADS:
                    for r in COMPARE_RESULTS:
                        self.consistency.labels(m, lo, replica, r)
        self.consistency.labels(mode, load, replica, result).inc()

    def summary(self) -> dict:
        """The counts so far: accuracy by task and length band, consistency by mode and load, requests."""
        acc: dict = defaultdict(lambda: {"correct": 0, "wrong": 0})
        by_length: dict = defaultdict(lambda: {"correct": 0, "wrong": 0})
        cons: dict = defaultdict(lambda: {"match": 0, "mismatch": 0})
        replicas: dict = defaultdict(lambda: {"match": 0, "mismatch": 0})
        statuses: dict = defaultdict(int)
        for family in self.registry.collect():
            for s in family.samples:
                if not s.name.endswith("_total"):
                    continue
                n, lb = int(s.value), s.labels
                if family.name == names.CANARY_CHECKS.record_name:
                    acc[lb["task"]][lb["result"]] += n
                    by_length[lb["length"]][lb["result"]] += n
                elif family.name == names.CANARY_CONSISTENCY.record_name:
                    cons[f"{lb['mode']}/{lb['load']}"][lb["result"]] += n
                    replicas[lb["replica"]][lb["result"]] += n
                elif family.name == names.CANARY_REQUESTS.record_name:
                    statuses[f"{lb['probe']}/{lb['status']}"] += n

        def share(d: dict, good: str) -> float | None:
            total = sum(d.values())
            return round(d[good] / total, 4) if total else None

        return {
            "requests": dict(statuses),
            "accuracy": {t: {**c, "accuracy": share(c, "correct")} for t, c in sorted(acc.items())},
            "accuracy_by_length": {b: {**c, "accuracy": share(c, "correct")} for b, c in sorted(by_length.items())},
            "consistency": {k: {**c, "match_rate": share(c, "match")} for k, c in sorted(cons.items())},
            "consistency_by_replica": {r: dict(c) for r, c in sorted(replicas.items())},
        }
