"""`sandbox verify --runs N` in sum: a row per run, a row per variant, and both as Markdown.

One headless drill at one seed says little of a variant: its page may come by a hair, its
baseline may sit just under a threshold. N runs at fresh seeds say how often it is fair and by how
much (the smallest page margin, the largest baseline margin, the slowest page).

Fresh seeds are drawn at random from [FRESH_SEED_MIN, FRESH_SEED_MAX): above the seeds `sandbox
drill` draws (under a million), never one recorded in a run directory, never twice.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

FRESH_SEED_MIN = 1_000_000  # `sandbox drill` without --seed draws below this
FRESH_SEED_MAX = 2**31

RUN_COLUMNS = {"incident": "incident", "variant": "variant", "seed": "seed", "run_id": "run", "ran_at": "ran at",
               "paged": "paged", "seconds_to_page": "s to page", "page_margin": "page margin",
               "baseline_margin": "baseline margin", "separated_by_page_plus_60s": "separated by page + 60 s",
               "separated": "separated over the window", "load_scale": "load scaled by", "pass": "pass"}
VARIANT_COLUMNS = {"incident": "incident", "variant": "variant", "runs": "runs", "passes": "passes",
                   "paged": "paged", "min_page_margin": "min page margin",
                   "max_baseline_margin": "max baseline margin", "max_seconds_to_page": "max s to page"}


def input_problem(runs: int, seed: int | None, markdown: Path | None) -> str | None:
    """What is wrong with `--runs`, `--seed` and `--markdown` together, or None."""
    if runs < 1:
        return f"--runs must be 1 or more, got {runs}"
    if seed is not None and runs != 1:
        return f"--seed {seed} runs that one seed once: drop --seed for {runs} runs at fresh seeds, or drop --runs"
    if markdown is not None and markdown.is_dir():
        return f"--markdown {markdown}: that is a directory"
    if markdown is not None and not markdown.parent.is_dir():
        return f"--markdown {markdown}: no directory {markdown.parent}"
    return None


def used_seeds(runs_dir: Path) -> set[int]:
    """The seeds recorded in runs_dir/*/run.json."""
    seeds = set()
    for path in Path(runs_dir).glob("*/run.json"):
        try:
            seed = json.loads(path.read_text()).get("seed")
        except (OSError, ValueError):
            continue  # a run still being written, or torn: its seed is no reason to stop
        if isinstance(seed, int):
            seeds.add(seed)
    return seeds


def fresh_seeds(n: int, used: set[int], rng: random.Random) -> list[int]:
    seeds: list[int] = []
    while len(seeds) < n:
        seed = rng.randrange(FRESH_SEED_MIN, FRESH_SEED_MAX)
        if seed not in used and seed not in seeds:
            seeds.append(seed)
    return seeds


def load_scale(capacity_check: dict | None) -> float | None:
    """What the drill's capacity check did to its load (run.json's calibration.capacity_check): its factor
    where applied, 1.0 where the calibration stood; None where nothing was checked (a fresh calibration, or
    a check that measured nothing). A run whose load moved on the host's noise reads differently from one at
    its written load (a tpot-regression variant since dropped, its load scaled to 0.69 on 2026-12-05: a page
    margin of 1.41)."""
    if not capacity_check:
        return None
    return round(float(capacity_check["factor"]), 3) if capacity_check.get("applied") else 1.0


def run_row(result: dict) -> dict:
    """One verify result (as _verify_one returns it) as a row; a drill that failed has no checks."""
    checks = result.get("checks") or {}
    page, sep = checks.get("page", {}), checks.get("separation", {})
    control = bool(page) and page.get("alert") is None
    siblings = sep.get("siblings")
    return {"incident": result["incident"], "variant": result["variant"], "seed": result["seed"],
            "run_id": result.get("run_id"), "ran_at": result.get("ran_at"),
            "paged": None if not page or control else page.get("seconds_to_page") is not None,
            "seconds_to_page": page.get("seconds_to_page"), "page_margin": page.get("page_margin"),
            "baseline_margin": page.get("baseline_margin"),
            "separated_by_page_plus_60s": sep.get("by_page_plus_60s", {}).get("pass"),
            "separated": None if siblings is None else all(s["separated"] for s in siblings.values()),
            "load_scale": load_scale(result.get("capacity_check")), "pass": bool(result["pass"])}


def _extreme(fn, values: list) -> float | None:
    present = [v for v in values if v is not None]
    return fn(present) if present else None


def summarise(rows: list[dict]) -> list[dict]:
    """Per variant, in the order first run: how many runs passed, and the worst of each figure."""
    by_variant: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_variant.setdefault((row["incident"], row["variant"]), []).append(row)
    return [{"incident": incident, "variant": variant, "runs": len(runs),
             "passes": sum(r["pass"] for r in runs), "paged": sum(r["paged"] is True for r in runs),
             "min_page_margin": _extreme(min, [r["page_margin"] for r in runs]),
             "max_baseline_margin": _extreme(max, [r["baseline_margin"] for r in runs]),
             "max_seconds_to_page": _extreme(max, [r["seconds_to_page"] for r in runs])}
            for (incident, variant), runs in by_variant.items()]


def cell(value) -> str:
    """A table cell: yes/no for booleans, '-' for nothing measured."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _table(columns: dict[str, str], rows: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[key]).replace("|", "\\|") for key in columns) + " |" for row in rows]
    return lines


def markdown(rows: list[dict], variants: list[dict], when: str, command: str) -> str:
    """The whole report: when and how it was made, then the runs and the variants in sum."""
    lines = ["# sandbox verify", "", f"- date: {when}", f"- command: `{command}`",
             f"- passed: {sum(r['pass'] for r in rows)} of {len(rows)} runs", "", "## Runs", "",
             *_table(RUN_COLUMNS, rows), "", "## Variants", "", *_table(VARIANT_COLUMNS, variants)]
    return "\n".join(lines) + "\n"
