"""`sandbox verify --runs N` in sum: rows per run, sums per variant, the Markdown report, fresh seeds."""
import json
import random

from sandbox.drill import verify_stats


def _result(seed, run_id, passed, delay, page_m, base_m, early, window, variant="throttled"):
    page = {"pass": passed, "alert": "ReplicaTimeToFirstTokenHigh", "seconds_to_page": delay,
            "baseline_alerts": [], "page_margin": page_m, "baseline_margin": base_m, "margins_ok": passed}
    separation = {"pass": early and window, "siblings": {"kernel": {"separated": window, "by": ["tpot"] if window else []}},
                  "by_page_plus_60s": {"pass": early}}
    return {"incident": "slow-replica", "variant": variant, "seed": seed, "run_id": run_id,
            "ran_at": f"2026-03-0{seed % 10}T10:00:00+00:00", "pass": passed, "status": "finished",
            "checks": {"page": page, "separation": separation, "pass": passed}}


FIRST = _result(1000001, "20260301-100000-a1b2c3", True, 41.0, 3.25, 0.41, True, True)
SECOND = {**_result(1000002, "20260302-100000-d4e5f6", False, None, 1.1, 0.7, False, True),
          "capacity_check": {"profile": "default", "cached_ceiling_rps": 18.762, "ceiling_now_rps": 12.945,
                             "readings_rps": [13.001, 12.889], "factor": 0.69, "applied": True}}
FAILED = {"incident": "slow-replica", "variant": "throttled", "seed": 1000003, "run_id": None,
          "ran_at": "2026-03-03T10:00:00+00:00", "pass": False, "checks": None, "status": "failed"}
CONTROL = {"incident": "quiet-shift", "variant": "nothing", "seed": 1000004, "run_id": "r4", "ran_at": "t", "pass": True,
           "checks": {"page": {"alert": None, "seconds_to_page": None, "page_margin": None, "baseline_margin": 0.3},
                      "separation": {"siblings": {}, "by_page_plus_60s": {"pass": True}}}}


def test_a_run_row_carries_the_page_its_margins_and_both_separations():
    assert verify_stats.run_row(FIRST) == {
        "incident": "slow-replica", "variant": "throttled", "seed": 1000001, "run_id": "20260301-100000-a1b2c3",
        "ran_at": "2026-03-01T10:00:00+00:00", "paged": True, "seconds_to_page": 41.0, "page_margin": 3.25,
        "baseline_margin": 0.41, "separated_by_page_plus_60s": True, "separated": True, "load_scale": None,
        "pass": True}
    second = verify_stats.run_row(SECOND)
    assert (second["paged"], second["separated_by_page_plus_60s"], second["separated"]) == (False, False, True)


def test_a_failed_drill_and_a_control_drill_have_nothing_to_page_on():
    failed = verify_stats.run_row(FAILED)
    assert [failed[k] for k in ("paged", "seconds_to_page", "page_margin", "separated", "pass")] == \
        [None, None, None, None, False]
    control = verify_stats.run_row(CONTROL)
    assert (control["paged"], control["baseline_margin"], control["separated"]) == (None, 0.3, True)


def test_the_sums_per_variant_are_the_counts_and_the_worst_figures():
    rows = [verify_stats.run_row(r) for r in (FIRST, SECOND, FAILED, CONTROL)]
    assert verify_stats.summarise(rows) == [
        {"incident": "slow-replica", "variant": "throttled", "runs": 3, "passes": 1, "paged": 1,
         "min_page_margin": 1.1, "max_baseline_margin": 0.7, "max_seconds_to_page": 41.0},
        {"incident": "quiet-shift", "variant": "nothing", "runs": 1, "passes": 1, "paged": 0,
         "min_page_margin": None, "max_baseline_margin": 0.3, "max_seconds_to_page": None}]


def test_the_markdown_report_has_the_date_the_command_and_both_tables():
    rows = [verify_stats.run_row(r) for r in (FIRST, SECOND)]
    text = verify_stats.markdown(rows, verify_stats.summarise(rows), "2026-03-02T11:00:00+00:00",
                                 "sandbox verify slow-replica --variant throttled --runs 2")
    assert text == """# sandbox verify

- date: 2026-03-02T11:00:00+00:00
- command: `sandbox verify slow-replica --variant throttled --runs 2`
- passed: 1 of 2 runs

## Runs

| incident | variant | seed | run | ran at | paged | s to page | page margin | baseline margin | separated by page + 60 s | separated over the window | load scaled by | pass |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| slow-replica | throttled | 1000001 | 20260301-100000-a1b2c3 | 2026-03-01T10:00:00+00:00 | yes | 41.0 | 3.25 | 0.41 | yes | yes | - | yes |
| slow-replica | throttled | 1000002 | 20260302-100000-d4e5f6 | 2026-03-02T10:00:00+00:00 | no | - | 1.1 | 0.7 | no | yes | 0.69 | no |

## Variants

| incident | variant | runs | passes | paged | min page margin | max baseline margin | max s to page |
|---|---|---|---|---|---|---|---|
| slow-replica | throttled | 2 | 1 | 1 | 1.1 | 0.7 | 41.0 |
"""


def test_fresh_seeds_are_distinct_above_the_drills_own_and_never_one_recorded(tmp_path):
    for i, seed in enumerate((5, 1_234_567)):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / "run.json").write_text(json.dumps({"seed": seed}))
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "run.json").write_text("{")
    assert verify_stats.used_seeds(tmp_path) == {5, 1_234_567}

    class Repeating(random.Random):
        """Draws a used seed, then the same fresh one twice, then another."""
        draws = iter([1_234_567, 2_000_000, 2_000_000, 3_000_000])

        def randrange(self, start, stop):
            assert (start, stop) == (verify_stats.FRESH_SEED_MIN, verify_stats.FRESH_SEED_MAX)
            return next(self.draws)

    assert verify_stats.fresh_seeds(2, {5, 1_234_567}, Repeating()) == [2_000_000, 3_000_000]
    seeds = verify_stats.fresh_seeds(50, set(), random.Random(0))
    assert len(set(seeds)) == 50 and min(seeds) >= 1_000_000


# -- the verify command over several runs, its drills faked -----------------------------------------------

def test_verify_runs_each_run_at_its_own_fresh_seed_and_sums_them(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sandbox.cli import app
    from sandbox.commands import drill

    monkeypatch.setenv("SANDBOX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SANDBOX_RUNS", str(tmp_path / "runs"))
    seen = []

    def fake_verify_one(catalogue, inc, variant, seed, duration, as_json):
        seen.append((inc.id, variant, seed))
        passed = len(seen) < 3
        return _result(seed, f"run{len(seen)}", passed, 40.0 + len(seen), 2.0 + len(seen), 0.5, passed, True)

    monkeypatch.setattr(drill, "_verify_one", fake_verify_one)
    report = tmp_path / "report.md"
    out = CliRunner().invoke(app, ["verify", "slow-replica", "--variant", "throttled", "--runs", "3", "--json",
                                   "--markdown", str(report)])
    assert out.exit_code == 1  # one run of three failed
    got = json.loads(out.stdout)
    seeds = [s for _, _, s in seen]
    assert [(i, v) for i, v, _ in seen] == [("slow-replica", "throttled")] * 3
    assert len(set(seeds)) == 3 and min(seeds) >= verify_stats.FRESH_SEED_MIN
    assert [r["seed"] for r in got["runs"]] == seeds and [r["pass"] for r in got["runs"]] == [True, True, False]
    assert got["pass"] is False and got["variants"] == [
        {"incident": "slow-replica", "variant": "throttled", "runs": 3, "passes": 2, "paged": 3,
         "min_page_margin": 3.0, "max_baseline_margin": 0.5, "max_seconds_to_page": 43.0}]
    lines = report.read_text().splitlines()
    assert lines[0] == "# sandbox verify" and lines[2].startswith("- date: ")
    assert lines[4] == "- passed: 2 of 3 runs" and lines[-1] == "| slow-replica | throttled | 3 | 2 | 3 | 3.0 | 0.5 | 43.0 |"


def test_a_row_says_what_the_capacity_check_did_to_the_drills_load():
    kept = {"profile": "default", "cached_ceiling_rps": 18.762, "ceiling_now_rps": 17.668, "factor": 0.942,
            "applied": False}
    assert verify_stats.load_scale(kept) == 1.0
    assert verify_stats.load_scale({**kept, "applied": True}) == 0.942
    assert verify_stats.load_scale(None) is None  # calibrated in this drill, or the check measured nothing
    assert verify_stats.run_row(SECOND)["load_scale"] == 0.69
