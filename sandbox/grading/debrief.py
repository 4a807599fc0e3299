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


def plot_signal(prom, name: str, expr: str, windows, events: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    w = windows
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    for label, xs, ys in _series(prom, expr, w.t0, w.t0 + w.end_s):
        ax.plot(xs, ys, linewidth=1.2, label=label[:60])
    ax.axvspan(WARMUP_S, w.inject_s, color="tab:green", alpha=0.12, label="baseline")
    ax.axvspan(min(w.settled_s + SETTLE_S, w.end_s), w.end_s, color="tab:red", alpha=0.12, label="incident")
    for e in events:
        if e.get("at_s") is None or e["kind"] not in ("deploy", "page", "inject"):
            continue
        ax.axvline(e["at_s"], color="black" if e["kind"] == "page" else "gray", linestyle="--", linewidth=0.8)
        ax.annotate(e["kind"] if e["kind"] != "deploy" else f"deploy {e.get('version', '')}", (e["at_s"], 1.0),
                    xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top", ha="right")
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
    events = list(events) + [{"kind": "inject", "at_s": windows.inject_s}]
    plots = [(n, plot_signal(prom, n, incident.signals[n], windows, events, out / f"{n}.png").name) for n in names]
    loc = ", ".join(f"{k} {v}" for k, v in answer["location"].items() if v) or "the whole fleet"
    md = [f"# Debrief: {incident.id} ({report.run})", "",
          f"**What happened:** `{answer['root_cause']}` ({loc}); variant `{sealed['variant']}`. "
          f"Remedies: {', '.join(f'`{r}`' for r in answer['remediation'])}.", "",
          f"## Score: {report.score}/100", "", "| criterion | points | why |", "|---|---|---|"]
    md += [f"| {c.name} | {c.points}/{c.max_points} | {c.sentence} |" for c in report.criteria]
    if report.time_to_diagnosis_s is not None:
        md += ["", f"Time to diagnosis: {report.time_to_diagnosis_s:.0f} s after the page."]
    md += ["", "## Timeline", "", "| at (s) | event |", "|---|---|"]
    for e in sorted(events, key=lambda e: (e.get("at_s") is None, e.get("at_s") or 0)):
        detail = " ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("at_s", "kind", "time"))
        md.append(f"| {'' if e.get('at_s') is None else round(e['at_s'])} | {e['kind']} {detail} |")
    md += ["", "## Signals", "", f"Baseline shaded green ({WARMUP_S:.0f} s to the injection), incident red "
           f"({SETTLE_S:.0f} s after the injection completed, to the end).", ""]
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
