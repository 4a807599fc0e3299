"""Issue 17's cases: each drawn variant with its best action and a plausible wrong one (and the accepted ones), as
data for bench/mitigation_table.py, which says what a case expects and why each wrong action is plausible."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    incident: str
    variant: str
    role: str  # "best" | "wrong" | "accepted" (an action the answer accepts, short of the best)
    action: str
    replica: str | None = None  # "injected" | "other" for a replica action; None for the rest
    # the oracle's outcomes that count as expected; the control has no page to recover from, so its oracle
    # gives no verdict (None), and its grading (no-action full, any change worse) is tested in
    # tests/grading/test_remediation_acted.py
    expect: tuple[str | None, ...] = ()
    quiet: bool = False  # the verdict must also say the page went quiet (an accepted action: the SLO back, the cause not)

    @property
    def key(self) -> str:
        return f"{self.incident}/{self.variant}/{self.role}"

    def expected(self, outcome: str | None, reason: str | None = None) -> bool:
        return outcome in self.expect and (not self.quiet or (reason or "").startswith("quiet"))


def _pair(incident: str, variant: str, best: str, wrong: str, *, replica_cause: bool = False) -> list[Case]:
    def pick(action: str, role: str) -> str | None:
        if action not in ("restart-replica", "drain-replica"):
            return None
        return ("injected" if role == "best" else "other") if replica_cause else None
    return [Case(incident, variant, "best", best, pick(best, "best"), ("recovered",)),
            Case(incident, variant, "wrong", wrong, pick(wrong, "wrong"), ("not recovered", "worse"))]


# The drawn variants (weight > 0), each with a remediation its answer accepts as the best action: the first one,
# except small-cache, whose first is raise-kv-cache, a deploy refused where the deployed pool is already the shipped
# one (the small pool is one replica's override), so its case is restart-replica, which brings the injected replica
# back on the deployed pool.
CASES: list[Case] = [
    *_pair("ttft-after-deploy", "prefix-off", "rollback-deploy", "restart-replica"),
    *_pair("ttft-after-deploy", "prefill-budget", "rollback-deploy", "restart-replica"),
    # the decoy: the clients' prompts grew, and the key's first remedy is no-action (nothing in the stack to undo),
    # graded in full with no recovery to wait for; scale-out is accepted (half the points, once it recovers), where
    # the machine has a core for a third replica (not on 2 cores: refused); rolling back its harmless deploy is wrong
    Case("ttft-after-deploy", "prompts-grew", "best", "no-action", expect=(None, "not recovered")),
    Case("ttft-after-deploy", "prompts-grew", "wrong", "rollback-deploy", expect=("not recovered", "worse")),
    Case("ttft-after-deploy", "prompts-grew", "accepted", "scale-out", expect=("recovered",)),
    *_pair("traffic-surge", "surge", "scale-out", "restart-replica"),
    # shed-load: the admitted requests' TTFT back under the SLO (the page quiet), while the load the fleet cannot
    # serve is still refused at the door, so the oracle's invariant (capacity for the offered load) is not met
    Case("traffic-surge", "surge", "accepted", "shed-load", expect=("not recovered",), quiet=True),
    *_pair("tpot-regression", "depth", "rollback-deploy", "restart-replica"),
    *_pair("tpot-regression", "attention-config", "rollback-deploy", "restart-replica"),
    *_pair("tpot-regression", "cpu-limit", "raise-cpu-limit", "restart-replica"),
    *_pair("slow-replica", "throttled", "drain-replica", "drain-replica", replica_cause=True),
    *_pair("slow-replica", "noisy-neighbour", "drain-replica", "drain-replica", replica_cause=True),
    *_pair("slow-replica", "small-cache", "restart-replica", "restart-replica", replica_cause=True),
    *_pair("slow-replica", "batch-cap", "restart-replica", "restart-replica", replica_cause=True),
    *_pair("flaky-outputs", "one-replica", "restart-replica", "restart-replica", replica_cause=True),
    *_pair("flaky-outputs", "batch-variance", "enable-batch-invariance", "restart-replica"),
    *_pair("flaky-outputs", "seed-scope", "honor-seed", "restart-replica"),
    *_pair("oom-at-peak", "headroom", "lower-memory-utilization", "restart-replica"),
    *_pair("oom-at-peak", "abort-path", "rollback-deploy", "shed-load"),
    *_pair("oom-at-peak", "batch-size", "lower-max-num-seqs", "restart-replica"),
    *_pair("quality-regression", "weights", "rollback-deploy", "restart-replica"),
    *_pair("quality-regression", "kv", "rollback-deploy", "restart-replica"),
    *_pair("quality-regression", "eos", "rollback-deploy", "restart-replica"),
    # the control: nothing to recover from, so no verdict either way (the grader calls any change worse)
    Case("quiet-shift", "nothing", "best", "no-action", expect=(None,)),
    Case("quiet-shift", "nothing", "wrong", "restart-replica", expect=(None,)),
]
