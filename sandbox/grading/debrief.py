"""The debrief, written after grading (never before): Markdown and HTML with PNG plots.

    runs/<run-id>/debrief/
      debrief.md, debrief.html    what happened (the answer, now revealed), the score with its
                                  sentences, the timeline
      <signal>.png                the page's signal and the distinguishing signals over the run,
                                  baseline and incident windows shaded, injection/deploys/page marked
"""
from __future__ import annotations

import html
import math
import time
from pathlib import Path

from sandbox.drill.verify import SETTLE_S, WARMUP_S

STEP_S = 2.0


def _series(prom, expr: str, start: float, end: float) -> list[tuple[str, list[float], list[float]]]:
    rows = prom.query_range(expr, start, end, STEP_S)
    out = []
    for row in rows[:8]:  # a readable plot: the first eight series
        label = ",".join(f"{k}={v}" for k, v in sorted(row["metric"].items()) if k != "__name__") or "value"
        xs, ys = [], []
        for ts, v in row["values"]:
            f = float(v)
            if math.isfinite(f):
                xs.append(float(ts) - start)
                ys.append(f)
        out.append((label, xs, ys))
    return out


def plot_signal(prom, name: str, expr: str, windows, events: list[dict], path: Path,
                recovered_s: float | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    w = windows
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    for label, xs, ys in _series(prom, expr, w.t0, w.t0 + w.end_s):
        ax.plot(xs, ys, linewidth=1.2, label=label[:60])
    ax.axvspan(WARMUP_S, w.inject_s, color="tab:green", alpha=0.12, label="baseline")
    ax.axvspan(min(w.settled_s + SETTLE_S, w.end_s), w.end_s, color="tab:red", alpha=0.12, label="incident")
    if recovered_s is not None and recovered_s < w.end_s:  # the oracle's quiet window on: service back
        ax.axvspan(recovered_s, w.end_s, color="tab:blue", alpha=0.12, label="recovered")
    colours = {"page": "black", "mitigation": "tab:blue"}
    for e in events:
        if e.get("at_s") is None or e["kind"] not in ("deploy", "page", "inject", "mitigation"):
            continue
        ax.axvline(e["at_s"], color=colours.get(e["kind"], "gray"), linestyle="--", linewidth=0.8)
        names = {"deploy": f"deploy {e.get('version', '')}", "mitigation": e.get("action", "")}
        label = names.get(e["kind"], e["kind"])
        ax.annotate(label, (e["at_s"], 1.0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top",
                    ha="right")
    ax.axvline(w.inject_s, color="tab:red", linewidth=1.0)
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("seconds since traffic started")
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_debrief(run_dir: Path, incident, sealed: dict, windows, report, prom, events: list[dict]) -> Path:
    out = Path(run_dir) / "debrief"
    out.mkdir(exist_ok=True)
    answer = sealed["answer"]
    names = [incident.primary] + [s for s in answer["evidence"] if s != incident.primary]
    # the candidate's actions carry their wall time (`sandbox mitigate` ran in another process): on the drill's clock
    events = [{**e, "at_s": round(e["started"] - windows.t0, 1)} if e.get("kind") == "mitigation" and "started" in e
              else e for e in events] + [{"kind": "inject", "at_s": windows.inject_s}]
    mitigation = sealed.get("mitigation") or {}
    verdict = mitigation.get("verdict") or {}
    recovered_s = verdict["quiet_from"] - windows.t0 if verdict.get("outcome") == "recovered" else None
    plots = [(n, plot_signal(prom, n, incident.signals[n], windows, events, out / f"{n}.png", recovered_s).name)
             for n in names]
    loc = ", ".join(f"{k} {v}" for k, v in answer["location"].items() if v) or "the whole fleet"
    md = [f"# Debrief: {incident.id} ({report.run})", "",
          f"**What happened:** `{answer['root_cause']}` ({loc}); variant `{sealed['variant']}`. "
          f"Remedies: {', '.join(f'`{r}`' for r in answer['remediation'])}.", "",
          f"## Score: {report.score}/100", "", "| criterion | points | why |", "|---|---|---|"]
    md += [f"| {c.name} | {c.points}/{c.max_points} | {c.sentence} |" for c in report.criteria]
    if report.time_to_diagnosis_s is not None:
        md += ["", f"Time to diagnosis: {report.time_to_diagnosis_s:.0f} s after the page."]
    if mitigation.get("actions"):
        md += ["", "## Mitigation", "", "| action | s after the page |", "|---|---|"]
        md += [f"| {a['action']}{' ' + a['replica'] if a.get('replica') else ''} | {a.get('from_page_s')} |"
               for a in mitigation["actions"]]
        md += ["", f"Verdict: **{verdict.get('outcome', 'not judged')}**. {verdict.get('reason', '')}"
               + (f" Time to mitigate: {verdict['ttm_s']:.0f} s." if verdict.get("ttm_s") is not None else "")]
    md += ["", "## Timeline", "", "| at (s) | event |", "|---|---|"]
    for e in sorted(events, key=lambda e: (e.get("at_s") is None, e.get("at_s") or 0)):
        detail = " ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("at_s", "kind", "time"))
        md.append(f"| {'' if e.get('at_s') is None else round(e['at_s'])} | {e['kind']} {detail} |")
    md += ["", "## Signals", "", f"Baseline shaded green ({WARMUP_S:.0f} s to the injection), incident red "
           f"({SETTLE_S:.0f} s after the injection completed, to the end)"
           + (", recovered blue (from the start of the oracle's quiet window)." if recovered_s is not None else ".")
           + (" Dashed blue lines: the candidate's actions." if mitigation.get("actions") else ""), ""]
    md += [f"### {n}\n\n`{incident.signals[n]}`\n\n![{n}]({png})\n" for n, png in plots]
    md.append(f"_written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}_")
    (out / "debrief.md").write_text("\n".join(md) + "\n")
    (out / "debrief.html").write_text(_html(incident, report, answer, sealed, loc, events, plots))
    return out / "debrief.md"


def _html(incident, report, answer, sealed, loc, events, plots) -> str:
    e = html.escape
    rows = "".join(f"<tr><td>{e(c.name)}</td><td>{c.points}/{c.max_points}</td><td>{e(c.sentence)}</td></tr>"
                   for c in report.criteria)
    timeline = "".join(f"<tr><td>{'' if ev.get('at_s') is None else round(ev['at_s'])}</td><td>{e(ev['kind'])}</td></tr>"
                       for ev in sorted(events, key=lambda ev: (ev.get("at_s") is None, ev.get("at_s") or 0)))
    figs = "".join(f"<h3>{e(n)}</h3><pre>{e(incident.signals[n])}</pre><img src='{e(png)}' alt='{e(n)}'>"
                   for n, png in plots)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Debrief {e(report.run)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{border:1px solid #ccc;"
            "padding:.3em}table{border-collapse:collapse}pre{white-space:pre-wrap}</style></head><body>"
            f"<h1>Debrief: {e(incident.id)}</h1><p><b>What happened:</b> <code>{e(answer['root_cause'])}</code> "
            f"({e(loc)}); variant <code>{e(sealed['variant'])}</code>.</p>"
            f"<h2>Score: {report.score}/100</h2><table><tr><th>criterion</th><th>points</th><th>why</th></tr>{rows}"
            f"</table><h2>Timeline</h2><table><tr><th>at (s)</th><th>event</th></tr>{timeline}</table>"
            f"<h2>Signals</h2>{figs}</body></html>\n")
