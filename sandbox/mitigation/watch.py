"""A drill's view of the candidate's mitigations: what was done, when, and what the recovery oracle says.

`sandbox mitigate`, run beside a drill (another terminal, an agent's tool call), appends each applied action
to the drill's events (`record_action`), as public as a deploy in a deploy log: the candidate's own action. The
drill polls `MitigationWatch`: it reads the new actions and, once paged, asks its oracle about the latest
action every JUDGE_EVERY_S until the oracle says recovered (or worse) or the drill ends. The summary goes to
run.json and the drill's JSON: each action with its time from the page, the latest verdict and the time to
mitigate.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable

from sandbox.mitigation.oracle import STILL_IN_PLACE, RecoveryOracle

JUDGE_EVERY_S = 10.0
REFUSED = "mitigation refused"  # the event kind of an action the machine could not take
PUBLIC_REASON = STILL_IN_PLACE  # what run.json says of a reason that names what the stack still runs


def record_action(record, report: dict, replica: str | None, version: str | None) -> None:
    """Add an applied action to a drill's events (`record`: its RunRecord)."""
    record.event("mitigation", None, action=report["action"], started=report["started"],
                 **({"replica": replica} if replica else {}), **({"version": version} if version else {}))


def record_refusal(record, action: str, started: float, reason: str) -> None:
    """Add an action this machine could not take (scale-out with no core free: `NoRoom`) to a drill's events. Not an
    action: nothing changed, so no oracle judges it; the grader credits the attempt where the key lists it (the
    candidate chose the remedy, the machine had no room for it). A bad input (`Refused`) is no attempt at all."""
    record.event(REFUSED, None, action=action, started=started, reason=reason)


class MitigationWatch:
    def __init__(self, record, oracle: Callable[[dict], RecoveryOracle | None]):
        """`oracle(page)`: the drill's oracle for its page (None for a page with no alert: the control's report)."""
        self.record, self._make_oracle = record, oracle
        self.actions: list[dict] = []
        self.refused: list[dict] = []  # actions the machine could not take (record_refusal): nothing changed
        self.verdict: dict | None = None
        self._oracle: RecoveryOracle | None = None
        self._offset = 0  # bytes of the events file read so far: a drill polls every half second
        self._judged_at = 0.0
        self.unread: str | None = None  # why the oracle could not be asked, the last time it could not

    def poll(self, page: dict | None, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for event in self._new_events():
            if event.get("kind") == "mitigation":
                self.actions.append({k: event[k] for k in ("action", "started", "replica", "version") if k in event})
                self.verdict = None  # a new action: the last verdict was about the one before
            elif event.get("kind") == REFUSED:
                self.refused.append({k: event[k] for k in ("action", "started", "reason") if k in event})
        if page is None or not self.actions or self._settled() or now - self._judged_at < JUDGE_EVERY_S:
            return
        if self._oracle is None:
            self._oracle = self._make_oracle(page)
            if self._oracle is None:
                return
        self._judged_at = now
        try:
            self.verdict = self._oracle.judge(self.actions[-1]["started"], now).to_dict()
        except (RuntimeError, OSError, ValueError) as e:  # Prometheus unreachable a moment: ask again next time
            self.unread = f"{type(e).__name__}: {e}"

    def _new_events(self) -> list[dict]:
        """The events appended since the last poll (whole lines only: a writer may be midway through one)."""
        try:
            with open(self.record.events_file, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        whole = chunk[:chunk.rfind(b"\n") + 1]
        self._offset += len(whole)
        return [json.loads(line) for line in whole.splitlines() if line.strip()]

    def _settled(self) -> bool:
        return self.verdict is not None and self.verdict["outcome"] in ("recovered", "worse")

    def summary(self, page: dict | None, sealed: bool = False) -> dict | None:
        """What run.json and the drill's JSON keep; None where no action was taken or tried. What the invariant
        read names the cause ("... runs engine.enable_prefix_caching=false"): only the sealed record keeps it."""
        if not self.actions and not self.refused:
            return None
        paged_at = (page or {}).get("paged_at")
        actions, refused = ([{**a, "from_page_s": None if paged_at is None else round(a["started"] - paged_at, 1)}
                             for a in kept] for kept in (self.actions, self.refused))
        verdict = self.verdict
        if verdict is not None and not sealed:
            hidden = verdict["reason"].startswith(PUBLIC_REASON)  # "...: <what the stack still runs>"
            verdict = {**verdict, "invariant": None if verdict["invariant"] is None else "still in place",
                       "reason": PUBLIC_REASON if hidden else verdict["reason"]}
        return {"actions": actions, **({"refused": refused} if refused else {}), "verdict": verdict,
                "ttm_s": (verdict or {}).get("ttm_s")}
