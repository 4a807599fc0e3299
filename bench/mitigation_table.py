"""Issue 17's table: every drawn variant mitigated twice, once by its best action and once by a plausible wrong one.

    .venv/bin/python bench/mitigation_table.py --list                       the cases, nothing run
    .venv/bin/python bench/mitigation_table.py --out runs/mitigation.jsonl  run the cases not yet in the file
    .venv/bin/python bench/mitigation_table.py --out runs/mitigation.jsonl --only slow-replica/throttled
    .venv/bin/python bench/mitigation_table.py --out runs/mitigation.jsonl --table   the Markdown table, nothing run

Each case is one `bench/mitigation_drill.py` (its own fresh stack, the action applied once run.json shows the
page). A line is appended to the output file as each case ends, and a case already there is skipped: the table
(43 drills of 7-15 minutes each on the 2-core machine) is gathered over several sittings, and a sitting that
ends mid-case loses that case only. `--role best` runs the best cases first. Not a test, and never beside
another stack.

When a case ends: a best case once its verdict is settled (recovered or worse, which the drill's watch never
revisits); a wrong case once settled, or at its horizon, what its best sibling needed from its action to a settled
recovery plus three minutes (`horizon`); otherwise at the drill's duration. The table says which. Each case's run
is then graded with the answer key's own diagnosis (bench/mitigation_grade.py), so its remediation points are what
the action earned: issue 17's point 4 on live runs.

What a case expects: the best action recovers (oracle: recovered, invariant holds); the wrong one does not
(not recovered, or worse). Two exceptions follow their answer keys: the decoy's best is no-action (the clients'
prompts grew: no verdict to wait for, graded in full), and its scale-out, accepted, recovers where the machine has
room; shed-load under the surge, accepted, brings the page back under its threshold while the cause stays (not
recovered, "quiet, but the cause is still in place"). The wrong action is a real operation that leaves the
mechanism in place, one a candidate who misread the evidence would take:
- a cause in one replica: the right action on another replica (`--replica other`), the slip of someone who read
  the wrong row of the by-replica table;
- a cause in every replica (a deploy, an in-place limit): `restart-replica`, "restart it and see", whose
  replica comes back on the same version (from an in-place CPU limit, without it, while the other keeps its own). A sibling's setting change is no such action: each puts a setting back
  to the known-good value and is refused where it already is (sandbox/mitigation/settings.py; the first run of
  prefix-off's wrong case, raise-prefill-budget, exited 2 and changed nothing);
- a leak that a restart does cure (abort-path, where restart-replica is an accepted remedy): `shed-load`, which
  protects admitted requests while the leak goes on;
- a cause in the traffic: rolling back the harmless deploy (the decoy), or a restart (the surge, no deploy).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.mitigation_cases import CASES, Case  # noqa: E402 - after the repo is on the path
from bench.mitigation_grade import grade_remediation  # noqa: E402
from sandbox.mitigation.oracle import RECOVERY_WINDOW_S  # noqa: E402
DRILL = REPO / "bench" / "mitigation_drill.py"
PYTHON = REPO / ".venv" / "bin" / "python"


def done(out: Path) -> dict[str, dict]:
    rows = {}
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a sitting's end: that case runs again
            rows[row["case"]] = row
    return rows


HORIZON_SLACK_S = 180.0


def horizon(case: Case, rows: dict[str, dict]) -> float | None:
    """How long after its action a wrong case is watched: what its best sibling took from its action to a settled
    recovery (the time to mitigate, less when the action came after the page, plus the quiet window), and three
    minutes more. A wrong action that has not recovered by then did not do what the right one did in that time.
    Where the best sibling did not recover (scale-out refused on a machine with no room), the slowest recovery of
    any best case in the file stands in for it. None (the whole duration) for a best case, or where no best case has
    recovered yet. An accepted case (its verdict never settles: the page quiet, the cause in place) and the decoy's
    no-action (it ran the whole 840 s on 2026-12-07) get the quiet window and the slack."""
    if case.expect == (None,):  # the control: mitigation_drill.py's own horizon after its action
        return None
    if case.role == "accepted" or case.action == "no-action":  # no-action: nothing changes for a verdict to wait on
        return RECOVERY_WINDOW_S + HORIZON_SLACK_S
    if case.role != "wrong":
        return None

    def took(row: dict) -> float:  # from the action to the start of its quiet window
        return row["ttm_s"] - (row["from_page_s"] or 0.0)

    best = rows.get(f"{case.incident}/{case.variant}/best")
    if best and best.get("outcome") == "recovered":
        return round(took(best) + RECOVERY_WINDOW_S + HORIZON_SLACK_S)
    recovered = [took(r) for r in rows.values() if r.get("role") == "best" and r.get("outcome") == "recovered"]
    return round(max(recovered) + RECOVERY_WINDOW_S + HORIZON_SLACK_S) if recovered else None


def run_case(case: Case, duration: int, horizon_s: float | None) -> dict:
    argv = [str(PYTHON), str(DRILL), case.incident, case.variant, case.action, "--duration", str(duration)]
    if case.replica:
        argv += ["--replica", case.replica]
    if horizon_s is not None:
        argv += ["--horizon", str(horizon_s)]
    started = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        result = {"unparsed": out.stdout[-1000:], "stderr": out.stderr[-1000:]}
    mitigation = ((result.get("drill") or {}).get("mitigation") or {})
    verdict = mitigation.get("verdict") or {}
    applied = result.get("applied") or {}
    return {"case": case.key, "incident": case.incident, "variant": case.variant, "role": case.role,
            "action": case.action, "replica": case.replica, "ran_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
            "took_s": round(time.time() - started), "action_rc": applied.get("rc"),
            "from_page_s": next((a.get("from_page_s") for a in mitigation.get("actions") or []), None),
            "outcome": verdict.get("outcome"), "ttm_s": mitigation.get("ttm_s"), "reason": verdict.get("reason"),
            "other_pages": verdict.get("other_pages"), "as_expected": case.expected(verdict.get("outcome"), verdict.get("reason")),
            "raw": result}


def _run_dir(row: dict) -> Path | None:
    path = ((row.get("raw") or {}).get("drill") or {}).get("run_dir")
    return Path(path) if path and Path(path).is_dir() else None


def _refusal_recorded(run_dir: Path) -> bool:
    """The run recorded the action the machine had no room for (`sandbox mitigate` does since 2026-12-07)."""
    try:
        return bool((json.loads((run_dir / "run.json").read_text()).get("mitigation") or {}).get("refused"))
    except (OSError, ValueError):
        return False


def grade(row: dict) -> dict:
    """The row with the grader's remediation points for its run (bench/mitigation_grade.py), where it has one. A
    refused action is graded only where its run recorded the attempt: a run without it holds no action, which the
    grader would judge by the key's own named remedy (the decoy's no-action, 10/10), not by what the case did."""
    run_dir = _run_dir(row)
    if run_dir is None or (row.get("action_rc") and not _refusal_recorded(run_dir)):
        return {k: v for k, v in row.items() if k != "graded"}
    return {**row, "graded": grade_remediation(run_dir, row["incident"], row["variant"])}


def backfill_grades(out: Path) -> None:
    """Grade the rows written before grading was part of a case whose run is still on this machine. The file is
    rewritten whole (atomically): only ever by the one table that runs at a time, between its cases, and only
    where every line is one case's whole row (a cut line or a repeated case leaves it as it is)."""
    if not out.is_file():
        return
    rows = done(out)
    if len(rows) != len(out.read_text().splitlines()):
        return
    graded = [r if "graded" in r or _run_dir(r) is None else grade(r) for r in rows.values()]
    if graded != list(rows.values()):
        tmp = out.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in graded))
        tmp.replace(out)


def _graded(row: dict) -> str:
    g = row.get("graded") or {}
    return f"{g['points']}/{g['max']}" if "points" in g else "-"


def _or_dash(value) -> str:
    return "-" if value is None else str(value)


def _ended(row: dict) -> str:
    """How the case's drill ended, from the drill's output: settled, at its horizon, refused, or its duration."""
    raw = row.get("raw") or {}
    if raw.get("ended_when_settled"):
        return "settled"
    if raw.get("ended_at_horizon"):
        return f"horizon {raw['horizon_s']:g} s"
    return "refused" if row.get("action_rc") else "duration"


def table(rows: dict[str, dict]) -> str:
    lines = ["| incident/variant | role | action | applied (s after page) | outcome | TTM (s) | as expected | "
             "remediation graded | ended | ran at |", "|---|---|---|---|---|---|---|---|---|---|"]
    for case in CASES:
        row = rows.get(case.key)
        action = case.action + (f" --replica {case.replica}" if case.replica else "")
        if row is None:
            lines.append(f"| {case.incident}/{case.variant} | {case.role} | {action} | - | not run | - | - | - | - | - |")
            continue
        lines.append(f"| {case.incident}/{case.variant} | {case.role} | {action} | {_or_dash(row['from_page_s'])} | "
                     f"{row['outcome'] or 'no verdict (rc ' + str(row['action_rc']) + ')'} | {row['ttm_s'] or '-'} | "
                     f"{'yes' if row['as_expected'] else 'NO'} | {_graded(row)} | {_ended(row)} | {row['ran_at']} |")
    ran = [rows[c.key] for c in CASES if c.key in rows]
    for row in ran:
        if (row.get("graded") or {}).get("sentence"):
            lines.append(f"\n{row['case']}, graded: {row['graded']['sentence']}")
    for row in ran:
        if row.get("action_rc"):
            lines.append(f"\n{row['case']}: the action was refused, nothing changed: "
                         f"{(row['raw'].get('applied') or {}).get('report')}")
    lines.append(f"\n{len(ran)} of {len(CASES)} cases run, {sum(r['as_expected'] for r in ran)} as expected.")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="the JSON-lines file the cases append to (and are resumed from)")
    ap.add_argument("--only", action="append", default=[], metavar="INCIDENT/VARIANT",
                    help="run only these variants' cases (repeatable)")
    ap.add_argument("--role", choices=("best", "wrong", "accepted"),
                    help="run only the cases of this role")
    ap.add_argument("--duration", type=int, default=840, help="each drill's traffic, s (mitigation_drill.py's default)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--table", action="store_true", help="print the Markdown table from --out and exit")
    args = ap.parse_args()
    known = {f"{c.incident}/{c.variant}" for c in CASES}
    unknown = [o for o in args.only if o not in known]
    if unknown:
        print(f"mitigation_table: unknown variant(s) {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    if args.list:
        for c in CASES:
            print(c.key, c.action, c.replica or "")
        return 0
    if args.out is None:
        print("mitigation_table: --out FILE is needed to run or tabulate", file=sys.stderr)
        return 2
    if args.table:
        print(table(done(args.out)))
        return 0
    backfill_grades(args.out)
    for case in CASES:
        if args.only and f"{case.incident}/{case.variant}" not in args.only:
            continue
        if case.key in done(args.out) or (args.role and case.role != args.role):
            continue
        rows = done(args.out)
        h = horizon(case, rows)
        print(f"[{time.strftime('%H:%M:%S')}] {case.key}: {case.action}"
              + (f" (horizon {h:g} s after the action)" if h else ""), file=sys.stderr, flush=True)
        row = grade(run_case(case, args.duration, h))
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] {case.key}: {row['outcome']} (ttm {row['ttm_s']})", file=sys.stderr,
              flush=True)
    print(table(done(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
