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

from sandbox.drill.margins import margin_series
from sandbox.drill.verify import SETTLE_S, WARMUP_S
from sandbox.mitigation.watch import REFUSED

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


LABEL_GAP = 0.04  # of the x-range: labels of events closer than this are stacked, not drawn over each other


def _shade(ax, w, recovered_s: float | None) -> None:
    """Baseline green; incident red from the new regime until service came back; recovered blue after."""
    ax.axvspan(WARMUP_S, w.inject_s, color="tab:green", alpha=0.12, label="baseline")
    back = recovered_s if recovered_s is not None and recovered_s < w.end_s else None
    ax.axvspan(min(w.settled_s + SETTLE_S, w.end_s), back if back is not None else w.end_s, color="tab:red",
               alpha=0.12, label="incident")
    if back is not None:  # the oracle's quiet window on: service back
        ax.axvspan(back, w.end_s, color="tab:blue", alpha=0.12, label="recovered")


def _mark(ax, w, events: list[dict]) -> None:
    """Each deploy, the page and each action as a dashed line, labelled; labels that would overlap stack down."""
    colours = {"page": "black", "mitigation": "tab:blue", REFUSED: "gray"}
    names = {"deploy": lambda e: f"deploy {e.get('version', '')}", "mitigation": lambda e: e.get("action", ""),
             REFUSED: lambda e: f"{e.get('action', '')} (refused)", "page": lambda e: "page",
             "inject": lambda e: "injection"}
    marks = sorted((e for e in events if e.get("at_s") is not None and e["kind"] in names), key=lambda e: e["at_s"])
    gap = LABEL_GAP * max(w.end_s, 1.0)
    last_at: list[float] = []  # per level: the last label's x
    for e in marks:
        ax.axvline(e["at_s"], color=colours.get(e["kind"], "gray"), linestyle="--", linewidth=0.8)
        level = next((i for i, x in enumerate(last_at) if e["at_s"] - x >= gap), len(last_at))
        if level == len(last_at):
            last_at.append(e["at_s"])
        last_at[level] = e["at_s"]
        ax.annotate(names[e["kind"]](e), (e["at_s"], 1.0 - 0.3 * (level % 3)), xycoords=("data", "axes fraction"),
                    fontsize=7, rotation=90, va="top", ha="right", color=colours.get(e["kind"], "dimgray"))
    ax.axvline(w.inject_s, color="tab:red", linewidth=1.0)


def _figure(title: str):
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds since traffic started")
    return plt, fig, ax


def _save(plt, fig, ax, path: Path) -> Path:
    # below the axes: inside them it covered the first events' labels
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=6, frameon=False)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_signal(prom, name: str, expr: str, windows, events: list[dict], path: Path,
                recovered_s: float | None = None) -> Path:
    w = windows
    plt, fig, ax = _figure(name)
    for label, xs, ys in _series(prom, expr, w.t0, w.t0 + w.end_s):
        ax.plot(xs, ys, linewidth=1.2, label=label[:60])
    _shade(ax, w, recovered_s)
    _mark(ax, w, events)
    return _save(plt, fig, ax, path)


def plot_page(prom, alert: str, windows, events: list[dict], path: Path, recovered_s: float | None = None) -> Path:
    """The SLO curve: the page's expression over its threshold (sandbox/drill/margins.py), the quantity the
    recovery oracle reads; above 1 the alert's condition holds."""
    w = windows
    plt, fig, ax = _figure(f"{alert}: its expression over its threshold (pages above 1)")
    margins = margin_series(prom, alert, w.t0, w.t0 + w.end_s, STEP_S)
    xs = sorted(margins)
    ax.plot([i * STEP_S for i in xs], [margins[i] for i in xs], linewidth=1.2, color="black", label="margin")
    ax.axhline(1.0, color="tab:red", linewidth=0.8, linestyle=":", label="threshold")
    _shade(ax, w, recovered_s)
    _mark(ax, w, events)
    return _save(plt, fig, ax, path)


def write_debrief(run_dir: Path, incident, sealed: dict, windows, report, prom, events: list[dict]) -> Path:
    out = Path(run_dir) / "debrief"
    out.mkdir(exist_ok=True)
    answer = sealed["answer"]
    names = [incident.primary] + [s for s in answer["evidence"] if s != incident.primary]
    # the candidate's actions carry their wall time (`sandbox mitigate` ran in another process): on the drill's clock
    events = [{**e, "at_s": round(e["started"] - windows.t0, 1)}
              if e.get("kind") in ("mitigation", REFUSED) and "started" in e
              else e for e in events] + [{"kind": "inject", "at_s": windows.inject_s}]
    mitigation = sealed.get("mitigation") or {}
    verdict = mitigation.get("verdict") or {}
    recovered_s = verdict["quiet_from"] - windows.t0 if verdict.get("outcome") == "recovered" else None
    plots = [(n, plot_signal(prom, n, incident.signals[n], windows, events, out / f"{n}.png", recovered_s).name)
             for n in names]
    alert = next((e["alert"] for e in events if e["kind"] == "page" and e.get("alert")), None)
    page_png = plot_page(prom, alert, windows, events, out / "page.png", recovered_s).name if alert else None
    loc = ", ".join(f"{k} {v}" for k, v in answer["location"].items() if v) or "the whole fleet"
    md = [f"# Debrief: {incident.id} ({report.run})", "",
          f"**What happened:** `{answer['root_cause']}` ({loc}); variant `{sealed['variant']}`. "
          f"Remedies: {', '.join(f'`{r}`' for r in answer['remediation'])}.", "",
          f"## Score: {report.score}/100", "", "| criterion | points | why |", "|---|---|---|"]
    md += [f"| {c.name} | {c.points}/{c.max_points} | {c.sentence} |" for c in report.criteria]
    if report.time_to_diagnosis_s is not None:
        md += ["", f"Time to diagnosis: {report.time_to_diagnosis_s:.0f} s after the page."]
    if mitigation.get("actions") or mitigation.get("refused"):
        md += ["", "## Mitigation", "", "| action | s after the page |", "|---|---|"]
        md += [f"| {what} | {at} |" for what, at in _action_rows(mitigation)]
        md += ["", _verdict_line(verdict)]
    md += ["", "## Timeline", "", "| at (s) | event |", "|---|---|"]
    for e in sorted(events, key=lambda e: (e.get("at_s") is None, e.get("at_s") or 0)):
        # an action's `started` is its wall time, which the at-column already gives on the drill's clock
        detail = " ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("at_s", "kind", "time", "started"))
        md.append(f"| {'' if e.get('at_s') is None else round(e['at_s'])} | {e['kind']} {detail} |")
    shading = _shading(recovered_s, bool(mitigation.get("actions") or mitigation.get("refused")))
    if page_png:
        md += ["", "## The page", "", f"{alert}'s expression over its threshold: above 1 its condition holds, and "
               "the recovery oracle waits for it to stay below 1. " + shading, "", f"![the page]({page_png})"]
    md += ["", "## Signals", "", shading, ""]
    md += [f"### {n}\n\n`{incident.signals[n]}`\n\n![{n}]({png})\n" for n, png in plots]
    md.append(f"_written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}_")
    (out / "debrief.md").write_text("\n".join(md) + "\n")
    (out / "debrief.html").write_text(_html(incident, report, answer, sealed, loc, events, plots,
                                            (alert, page_png) if page_png else None, shading))
    return out / "debrief.md"


def _action_rows(mitigation: dict) -> list[tuple[str, object]]:
    """(what, seconds after the page) for each action taken, then each the machine had no room for."""
    return ([(a["action"] + (f" {a['replica']}" if a.get("replica") else ""), a.get("from_page_s"))
             for a in mitigation.get("actions") or []]
            + [(f"{a['action']} (refused, nothing changed: {a.get('reason', '')})", a.get("from_page_s"))
               for a in mitigation.get("refused") or []])


def _verdict_line(verdict: dict) -> str:
    reason = (verdict.get("reason") or "").rstrip(".")
    return (f"Verdict: **{verdict.get('outcome', 'not judged')}**." + (f" {reason}." if reason else "")
            + (f" Time to mitigate: {verdict['ttm_s']:.0f} s." if verdict.get("ttm_s") is not None else ""))


def _shading(recovered_s: float | None, acted: bool) -> str:
    until = "until the oracle's quiet window began" if recovered_s is not None else "to the end"
    return (f"Baseline shaded green ({WARMUP_S:.0f} s to the injection), incident red ({SETTLE_S:.0f} s after the "
            f"injection completed, {until})"
            + (", recovered blue (from the start of the oracle's quiet window)." if recovered_s is not None else ".")
            + (" Dashed blue lines: the candidate's actions (gray: refused, nothing changed)." if acted else ""))


def _html(incident, report, answer, sealed, loc, events, plots, page=None, shading="") -> str:
    e = html.escape
    mitigation = sealed.get("mitigation") or {}
    acted = ""
    if mitigation.get("actions") or mitigation.get("refused"):
        acts = "".join(f"<tr><td>{e(what)}</td><td>{e(str(at))}</td></tr>" for what, at in _action_rows(mitigation))
        verdict = _verdict_line(mitigation.get("verdict") or {}).replace("**", "")
        acted = (f"<h2>Mitigation</h2><table><tr><th>action</th><th>s after the page</th></tr>{acts}</table>"
                 f"<p>{e(verdict)}</p>")
    if page:
        acted += (f"<h2>The page</h2><p>{e(page[0])}'s expression over its threshold (above 1 its condition "
                  f"holds). {e(shading)}</p><img src='{e(page[1])}' alt='the page'>")
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
            f"</table>{acted}<h2>Timeline</h2><table><tr><th>at (s)</th><th>event</th></tr>{timeline}</table>"
            f"<h2>Signals</h2>{figs}</body></html>\n")
