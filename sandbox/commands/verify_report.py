"""What `sandbox verify` prints: one variant's checks, or the table of many."""
from __future__ import annotations

from rich.table import Table

from sandbox.commands.common import console


def verify_row(r: dict) -> dict:
    c = r["checks"] or {}
    sep = c.get("separation", {})
    by = {name: s["by"] for name, s in sep.get("siblings", {}).items()}
    return {"incident": r["incident"], "variant": r["variant"], "pass": r["pass"],
            "seconds_to_page": c.get("page", {}).get("seconds_to_page"), "separated_by": by,
            "leaks": len(c.get("no_leaks", {}).get("hits", []))}


def print_verify_table(rows: list[dict]) -> None:
    table = Table("incident", "variant", "pass", "page after (s)", "separated from siblings by", "leaks")
    for r in rows:
        table.add_row(r["incident"], r["variant"], "yes" if r["pass"] else "NO", str(r["seconds_to_page"]),
                      "; ".join(f"{k}: {', '.join(v) or '-'}" for k, v in r["separated_by"].items()) or "-",
                      str(r["leaks"]))
    console.print(table)



def print_verify_checks(out: dict) -> None:
    c = out["checks"] or {}
    mark = lambda ok: "[green]pass[/green]" if ok else "[red]FAIL[/red]"  # noqa: E731
    console.print(f"{out['incident']} / {out['variant']} (seed {out['seed']}): {mark(out['pass'])}")
    if "page" in c:
        p = c["page"]
        console.print(f"  page      {mark(p['pass'])} {p['alert']} after {p['seconds_to_page']}s; "
                      f"baseline alerts: {p['baseline_alerts'] or 'none'}")
    if "separation" in c:
        s = c["separation"]
        console.print(f"  separate  {mark(s['pass'])} own {s['own_signature']}")
        for name, sib in s["siblings"].items():
            console.print(f"            vs {name}: {'by ' + ', '.join(sib['by']) if sib['separated'] else 'NOT separated'}")
        for sig in s["signals"]:
            console.print(f"            {sig['signal']:<22} {sig['baseline']} -> {sig['incident']} "
                          f"(noise {sig['noise']}) {sig['direction']}")
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
