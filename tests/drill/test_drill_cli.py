"""`sandbox drill` and `sandbox verify` refuse bad input before anything starts."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from incidents.schema import load_catalogue

REPO = Path(__file__).resolve().parents[2]
BAD = """id: slow-replica
page:
  alert: ReplicaInterTokenLatencyHigh
traffic: {profile: short, rate: 2.0}
timeline: {baseline_s: 20, inject_at_s: -5, duration_s: 60}
signals:
  spread: max(rate(vllm:num_preemptions_total[30s])
primary: spread
variants:
  a-b:
    faults:
      - {type: unplug-the-cable}
    signature: {spread: up}
    answer:
      root_cause: cpu-throttled-replica
      remediation: [drain-replica]
      location: {replica: null, version: null, component: node}
      evidence: [spread]
"""


def _sandbox(tmp_path, *args, incidents: Path | None = None):
    env = {"PATH": "/usr/bin:/bin", "SANDBOX_HOME": str(tmp_path / "home"), "SANDBOX_RUNS": str(tmp_path / "runs"),
           "SANDBOX_INCIDENTS": str(incidents or REPO / "incidents"), "SANDBOX_RAY_PORT": "6391"}
    return subprocess.run([sys.executable, "-m", "sandbox.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)


def test_a_malformed_incident_file_is_refused_naming_file_line_and_field(tmp_path):
    bad = tmp_path / "incidents"
    bad.mkdir()
    (bad / "slow-replica.yaml").write_text(BAD)
    out = _sandbox(tmp_path, "drill", "slow-replica", "--headless", incidents=bad)
    assert out.returncode == 2
    err = " ".join(out.stderr.split())
    assert "slow-replica.yaml:5: timeline.inject_at_s" in err
    assert "slow-replica.yaml:7: signals.spread" in err and "parse" in err
    assert "slow-replica.yaml:12: variants.a-b.faults[0].type" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()  # nothing started


def test_unknown_incidents_and_variants_are_refused_with_the_choices(tmp_path):
    out = _sandbox(tmp_path, "drill", "slowish-replica")
    assert out.returncode == 2 and "choose from" in out.stderr and "slow-replica" in out.stderr
    out = _sandbox(tmp_path, "verify", "slow-replica", "--variant", "nope")
    assert out.returncode == 2 and "unknown variant 'nope'" in " ".join(out.stderr.split())
    out = _sandbox(tmp_path, "drill", "slow-replica", "--variant", "nope")
    assert out.returncode == 2 and "unknown variant 'nope'" in " ".join(out.stderr.split())
    out = _sandbox(tmp_path, "drill", "--random", "--variant", "small-cache")
    assert out.returncode == 2 and "--variant goes with a named incident" in " ".join(out.stderr.split())
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--runs", "0"], "--runs must be 1 or more, got 0"),
    (["--runs", "3", "--seed", "5"], "--seed 5 runs that one seed once: drop --seed for 3 runs at fresh seeds"),
    (["--markdown", "{tmp}/nowhere/report.md"], "--markdown {tmp}/nowhere/report.md: no directory {tmp}/nowhere"),
    (["--markdown", "{tmp}"], "--markdown {tmp}: that is a directory"),
])
def test_verify_refuses_bad_runs_seeds_and_report_paths_before_any_stack_starts(tmp_path, args, message):
    began = time.monotonic()
    out = _sandbox(tmp_path, "verify", "slow-replica", *[a.format(tmp=tmp_path) for a in args])
    # A stack takes a minute or more to start; a refusal is one interpreter's start-up.
    assert out.returncode == 2 and time.monotonic() - began < 10
    assert message.format(tmp=tmp_path) in " ".join(out.stderr.split())
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()


def test_the_list_shows_every_incident_and_no_variant_or_cause(tmp_path):
    out = _sandbox(tmp_path, "drill", "--list", "--json")
    assert out.returncode == 0, out.stderr
    catalogue = load_catalogue(REPO / "incidents")
    assert sorted(r["incident"] for r in __import__("json").loads(out.stdout)) == sorted(catalogue)
    for inc in catalogue.values():
        for key, variant in inc.variants.items():
            assert variant.answer.root_cause not in out.stdout and f'"{key}"' not in out.stdout


def test_the_shipped_catalogue_has_every_incident_with_its_variants():
    catalogue = load_catalogue(REPO / "incidents")
    counts = {i.id: len(i.variants) for i in catalogue.values()}
    assert counts == {"ttft-after-deploy": 4, "oom-at-peak": 3, "flaky-outputs": 3, "slow-replica": 5,
                      "quality-regression": 3, "tpot-regression": 4, "traffic-surge": 1, "quiet-shift": 1}
