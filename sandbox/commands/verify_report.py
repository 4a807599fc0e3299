"""What `sandbox verify` prints: one variant's checks, or the tables of many runs."""
from __future__ import annotations

from rich.table import Table

from sandbox.commands.common import console
from sandbox.drill.verify_stats import RUN_COLUMNS, VARIANT_COLUMNS, cell


def verify_row(r: dict) -> dict:
    c = r["checks"] or {}
    sep = c.get("separation", {})
    by = {name: s["by"] for name, s in sep.get("siblings", {}).items()}
    return {"incident": r["incident"], "variant": r["variant"], "pass": r["pass"],
            "seconds_to_page": c.get("page", {}).get("seconds_to_page"), "separated_by": by,
            "leaks": len(c.get("no_leaks", {}).get("hits", []))}


def print_stats_tables(rows: list[dict], variants: list[dict]) -> None:
    """The runs of `sandbox verify --runs N` / `--all`, then each variant in sum."""
    for title, columns, data in (("runs", RUN_COLUMNS, rows), ("variants", VARIANT_COLUMNS, variants)):
        table = Table(*columns.values(), title=title)
        for row in data:
            table.add_row(*(cell(row[key]) for key in columns))
        console.print(table)


def print_verify_checks(out: dict) -> None:
    c = out["checks"] or {}
    mark = lambda ok: "[green]pass[/green]" if ok else "[red]FAIL[/red]"
    console.print(f"{out['incident']} / {out['variant']} (seed {out['seed']}): {mark(out['pass'])}")
    if "page" in c:
        p = c["page"]
        console.print(f"  page      {mark(p['pass'])} {p['alert']} after {p['seconds_to_page']}s; "
                      f"baseline alerts: {p['baseline_alerts'] or 'none'}")
        console.print(f"            margin held {p.get('page_margin')}, baseline {p.get('baseline_margin')}"
                      + (f" ({p['baseline_margin_alert']})" if p.get("baseline_margin_alert") else ""))
    if "separation" in c:
        s = c["separation"]
        console.print(f"  separate  {mark(s['pass'])} own {s['own_signature']}")
        for name, sib in s["siblings"].items():
            console.print(f"            vs {name}: {'by ' + ', '.join(sib['by']) if sib['separated'] else 'NOT separated'}")
        for sig in s["signals"]:
            console.print(f"            {sig['signal']:<22} {sig['baseline']} -> {sig['incident']} "
                          f"(noise {sig['noise']}) {sig['direction']}")
        early = s.get("by_page_plus_60s")
        if early is not None:
            unsettled = f"; not settled yet: {', '.join(early['unsettled'])}" if early.get("unsettled") else ""
            console.print(f"            by the page + 60 s ({early.get('until_s')}s of traffic): "
                          f"{mark(early['pass'])}{unsettled}{'; ' + early['note'] if early.get('note') else ''}")
            for name, sib in early["siblings"].items():
                console.print(f"              vs {name}: "
                              f"{'by ' + ', '.join(sib['by']) if sib['separated'] else 'NOT separated'}")
    if "no_leaks" in c:
        n = c["no_leaks"]
        console.print(f"  no leaks  {mark(n['pass'])} scanned {n['scanned']}" +
                      "".join(f"\n            {h['term']!r} in {h['surface']}: {h['where']}" for h in n["hits"]))
    if "others_quiet" in c:
        q = c["others_quiet"]
        moved = {k: v["direction"] for k, v in q["primary_signals"].items() if v["direction"] not in ("flat", "no data")}
        console.print(f"  quiet     {mark(q['pass'])} ({q['family']}) pages of other kinds: "
                      f"{q['other_pages_fired'] or 'none'}; other kinds moved: {q['other_kinds_moved'] or 'none'}")
        console.print(f"            other incidents' primary signals that moved: {moved or 'none'}")
