"""Diagnosis files fuzzed from the golden ones: every broken file is refused with FILE:LINE: field problems,
never a crash; `sandbox diagnose --check` says so with exit code 2, no traceback, and writes nothing.

Cases start from every verified recording's golden diagnoses (tests/mutations.py says how they are
broken). JSON is YAML, so the same loader reads both; a few JSON cases go through the CLI too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.grading.diagnosis import DiagnosisError, parse_diagnosis
from tests.mutations import documents, fuzz

FIXTURES = Path(__file__).with_name("fixtures")
GOLDEN = sorted(FIXTURES.glob("*/golden/*.yaml"))
SOURCES = [p.read_text() for p in GOLDEN[::3]]  # a third of them: their shapes repeat
EXAMPLES = 60


@pytest.fixture(scope="module")
def outcomes():
    return {"loaded": 0, "refused": 0}


@fuzz(EXAMPLES)
@given(text=st.sampled_from(SOURCES).flatmap(documents))
def test_a_broken_diagnosis_is_refused_naming_its_line_and_field(outcomes, text):
    try:
        parse_diagnosis(text, "d.yaml")
    except DiagnosisError as e:
        assert e.problems
        last_line = text.count("\n") + 2
        for p in e.problems:
            assert p.file == "d.yaml" and isinstance(p.line, int) and 1 <= p.line <= last_line, p
            assert p.message.strip(), p
        outcomes["refused"] += 1
    else:
        outcomes["loaded"] += 1


def test_the_fuzzer_tried_its_cases_and_most_were_refused(outcomes, record_property):
    if not sum(outcomes.values()):
        pytest.skip("counts the fuzz test's cases: run the module")
    record_property("fuzzed_diagnoses", dict(outcomes))
    print(f"\nfuzzed diagnoses: {outcomes}")
    assert sum(outcomes.values()) >= 0.9 * EXAMPLES and outcomes["refused"] >= 0.7 * EXAMPLES, outcomes


def _golden() -> dict:
    import yaml
    return yaml.safe_load(GOLDEN[0].read_text())


@pytest.mark.parametrize("name,text", [
    ("JSON with NaN and a huge summary", json.dumps({**_golden(), "location": float("nan"), "summary": "x" * 9000})),
    ("broken PromQL", json.dumps({**_golden(), "evidence": [{"query": "sum(rate(x[1m]", "observation": "o"}]})),
    ("a NUL", "run: x\x00\n"),
], ids=lambda v: v if len(v) < 40 else None)
def test_diagnose_check_refuses_a_broken_file_with_exit_code_2_no_traceback_and_writes_nothing(tmp_path, name, text):
    path, runs, home = tmp_path / "d.json", tmp_path / "runs", tmp_path / "home"
    path.write_text(text)
    env = dict(os.environ, SANDBOX_RUNS=str(runs), SANDBOX_HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "sandbox.cli", "diagnose", "--check", str(path)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    assert f"{path}:" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json"]
