"""Prune a recorded run to what grading needs, for fixtures kept in the repo.

The run's TSDB is served read-only; every raw sample of the series that the incident's signals,
the alert rules' results (`ALERTS`) and any extra expressions read is exported as OpenMetrics text,
and Prometheus' own `promtool tsdb create-blocks-from openmetrics` writes a fresh TSDB from it.
Nothing is synthesized: the pruned data is a subset of the recorded samples, at their recorded
times. The public files, the sealed answer and the key are copied beside it.

    python -m sandbox.grading.prune RUN_DIR OUT_DIR [--key KEY] [--expr PROMQL ...]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from incidents.promql import metric_families, promtool_binary
from incidents.schema import load_catalogue
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun
from services.stack.settings import SandboxConfig

_SUFFIXES = ("", "_bucket", "_sum", "_count", "_total", "_created")
ALWAYS = ("ALERTS",)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _names(prom, families: set[str]) -> list[str]:
    all_names = prom.label_values("__name__")
    wanted = {f + s for f in families for s in _SUFFIXES}
    return sorted(n for n in all_names if n in wanted)


def export_openmetrics(prom, names: list[str], start: float, end: float) -> str:
    """Every raw sample of the named series in [start, end], one series after another."""
    lines = []
    span = max(1, math.ceil(end - start))
    for name in names:
        if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name):
            continue
        rows = prom.query(f'{{__name__="{name}"}}[{span}s]', at=end)
        for row in sorted(rows, key=lambda r: sorted(r["metric"].items())):
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(row["metric"].items()) if k != "__name__")
            series = f"{name}{{{labels}}}" if labels else name
            for ts, v in row["values"]:
                lines.append(f"{series} {v} {float(ts):.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def prune(run_dir: Path, key_file: Path, incident, out_dir: Path, extra_exprs=()) -> Path:
    run = RecordedRun(run_dir, key_file)
    w = run.windows()
    families = set(ALWAYS)
    for expr in list(incident.signals.values()) + list(extra_exprs):
        families.update(metric_families(expr))
    out_run = Path(out_dir) / run.run_id
    if out_run.exists():
        shutil.rmtree(out_run)
    (out_run / "sealed").mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="sandbox-prune-") as tmp:
        with RecordedPrometheus(Path(run_dir) / "prometheus") as prom:
            text = export_openmetrics(prom, _names(prom, families), w.t0 - 5, w.t0 + w.end_s + 5)
        om = Path(tmp) / "data.om"
        om.write_text(text)
        subprocess.run([promtool_binary(), "tsdb", "create-blocks-from", "openmetrics", str(om),
                        str(out_run / "prometheus")], check=True, capture_output=True, text=True)
    for name in ("run.json", "events.jsonl"):
        if (Path(run_dir) / name).is_file():
            shutil.copy(Path(run_dir) / name, out_run / name)
    shutil.copy(Path(run_dir) / "sealed" / "answer.bin", out_run / "sealed" / "answer.bin")
    shutil.copy(key_file, Path(out_dir) / f"{run.run_id}.key")
    return out_run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--key", type=Path)
    ap.add_argument("--expr", action="append", default=[], help="also keep what this PromQL reads")
    args = ap.parse_args(argv)
    cfg = SandboxConfig.from_env()
    key = args.key or cfg.keys_dir / f"{args.run_dir.name}.key"
    public = json.loads((args.run_dir / "run.json").read_text())
    incident = load_catalogue(cfg.incidents)[public["incident"]]
    out = prune(args.run_dir, key, incident, args.out_dir, args.expr)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(json.dumps({"fixture": str(out), "bytes": size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
