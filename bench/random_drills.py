"""Random drills in a row, as a newcomer runs them: does each page (or report), with no alert in its baseline?

    .venv/bin/python bench/random_drills.py --drills 10 --out F.jsonl     # about 6-7 minutes a drill here
    .venv/bin/python bench/random_drills.py --table F.jsonl               # the Markdown table of a file

Each drill is `sandbox drill --random --headless --duration 300 --json`, one after another, at a seed the CLI
draws itself (none chosen here). The first drill calibrates where the cache is missing or stale; the rest reuse
it. After each, the run's record is read, and its sealed answer opened with its key (what the grader does), for
the incident, variant, injection and page times, and the alerts that fired before the injection. One JSON line
a drill is appended to --out as it ends, so a stopped series keeps what it has. Not a test (an hour for ten).
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

from sandbox.drill.record import RunRecord  # noqa: E402
from services.stack.settings import SandboxConfig  # noqa: E402

DRILL = ["drill", "--random", "--headless", "--duration", "300", "--json"]


def one_drill() -> dict:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "sandbox.cli", *DRILL], capture_output=True, text=True, cwd=REPO,
                         timeout=1800, check=False)
    row = {"exit": out.returncode, "seconds": round(time.monotonic() - t0, 1)}
    try:
        summary = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {**row, "error": (out.stderr or out.stdout)[-1000:]}
    cfg = SandboxConfig()
    record = RunRecord.open(Path(summary["run_dir"]), cfg.keys_dir)
    public, sealed = record.public(), record.unseal()
    injected = [f["at_s"] for f in sealed["faults"] if f["event"] == "inject" and f["at_s"] is not None]
    landed = [f.get("done_s") or f["at_s"] for f in sealed["faults"] if f["event"] == "inject" and f["at_s"] is not None]
    inject_s = min(injected) if injected else sealed["plan"]["inject_at_s"]  # a traffic change: its planned time
    page = sealed.get("page") or {}
    paged_at = next((e["at_s"] for e in record.events() if e["kind"] == "page"), None)
    return {**row, "run": public["run_id"], "seed": public["seed"], "status": sealed["status"],
            "incident": public.get("incident") or sealed["plan"]["incident"], "variant": sealed["variant"],
            "page": page.get("alert") or ("report" if page else None), "paged_at_s": paged_at,
            "inject_s": round(inject_s, 1), "landed_s": round(max(landed), 1) if landed else None,
            "s_to_page": round(paged_at - inject_s, 1) if paged_at is not None else None,
            "early_alerts": sealed.get("early_alerts") or [],
            "traffic_rps": (summary.get("traffic") or {}).get("request_rate"),
            "statuses": (summary.get("traffic") or {}).get("statuses")}


def table(rows: list[dict]) -> str:
    lines = ["| # | run | seed | incident / variant | injected at s | page | s to page | early alerts | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        if "error" in r:
            lines.append(f"| {i} | - | - | - | - | - | - | - | error: {r['error'][-120:]!r} |")
            continue
        lines.append(f"| {i} | {r['run']} | {r['seed']} | {r['incident']} / {r['variant']} | {r['inject_s']} | "
                     f"{r['page'] or '**none**'} | {r['s_to_page'] if r['s_to_page'] is not None else '-'} | "
                     f"{', '.join(a if isinstance(a, str) else a.get('alert', '?') for a in r['early_alerts']) or 'none'}"
                     f" | {r['status']} |")
    paged = sum(1 for r in rows if r.get("page"))
    clean = sum(1 for r in rows if "error" not in r and not r["early_alerts"])
    lines.append(f"\n{paged} of {len(rows)} paged (or reported); {clean} of {len(rows)} without a baseline alert.")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drills", type=int, default=10, help="how many drills in a row (default 10)")
    ap.add_argument("--out", type=Path, help="append one JSON line a drill to this file")
    ap.add_argument("--table", type=Path, help="print the Markdown table of a JSONL file and exit")
    args = ap.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return 0
    if args.drills < 1:
        print("random_drills: --drills must be at least 1", file=sys.stderr)
        return 2
    rows = []
    for i in range(args.drills):
        print(f"[random-drills {time.strftime('%H:%M:%S')}] drill {i + 1} of {args.drills}", file=sys.stderr,
              flush=True)
        row = one_drill()
        rows.append(row)
        line = json.dumps(row, sort_keys=True)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")
    print(table(rows), file=sys.stderr)
    return 0 if all(r.get("page") and not r.get("early_alerts") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
