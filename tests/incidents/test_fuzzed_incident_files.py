"""Incident files fuzzed from valid ones: every broken file is refused with FILE:LINE: field problems,
never a crash, a hang or a traceback; the CLI says so with exit code 2 and writes nothing.

Cases start from the schema test's sample and every file of the shipped catalogue (see
tests/mutations.py for the edits). The first run found a seven-line alias bomb that never
finished loading (4.8 million nodes); incidents/source.py now refuses a repeated block.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incidents.schema import IncidentError, load_incident
from tests.incidents.samples import VALID
from tests.mutations import documents, fuzz

pytestmark = pytest.mark.usefixtures("promtool")

CATALOGUE = Path(__file__).resolve().parents[2] / "incidents"
SOURCES = [("ttft-after-deploy", VALID)] + [(p.stem, p.read_text()) for p in sorted(CATALOGUE.glob("*.yaml"))]
CASES = st.sampled_from(SOURCES).flatmap(lambda s: documents(s[1]).map(lambda text: (s[0], text)))
EXAMPLES = 60


def check_refusal(path: Path, text: str) -> str:
    """'loaded' or 'refused'; a refusal must name this file, a line inside it (or just past its end) and
    say something. Any other exception fails the test."""
    try:
        load_incident(path)
    except IncidentError as e:
        assert e.problems, "an IncidentError with no problem"
        last_line = text.count("\n") + 2
        for p in e.problems:
            assert p.file == str(path), p
            assert isinstance(p.line, int) and 1 <= p.line <= last_line, p
            assert p.message.strip(), p
        assert str(e).startswith(f"{path}:"), str(e)[:200]
        return "refused"
    return "loaded"


@pytest.fixture(scope="module")
def outcomes():
    return {"loaded": 0, "refused": 0}


@fuzz(EXAMPLES)
@given(case=CASES)
def test_a_broken_incident_file_is_refused_naming_its_line_and_field(tmp_path_factory, outcomes, case):
    stem, text = case
    path = tmp_path_factory.getbasetemp() / "fuzzed-incidents" / f"{stem}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    outcomes[check_refusal(path, text)] += 1


def test_the_fuzzer_tried_its_cases_and_most_were_refused(outcomes, record_property):
    if not sum(outcomes.values()):
        pytest.skip("counts the fuzz test's cases: run the module")
    record_property("fuzzed_incident_files", dict(outcomes))
    print(f"\nfuzzed incident files: {outcomes}")
    # The edits are meant to break: a fuzzer whose cases mostly still load tests little.
    assert sum(outcomes.values()) >= 0.9 * EXAMPLES and outcomes["refused"] >= 0.8 * EXAMPLES, outcomes


ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 7))


@pytest.mark.parametrize("name,text", [
    ("alias bomb", ALIAS_BOMB),
    ("NUL and BOM", "\ufeffid: \x00ttft\n"),
    ("a huge number", VALID.replace("baseline_s: 90", "baseline_s: 1e999")),
], ids=lambda v: v if len(v) < 20 else None)
def test_the_cli_refuses_a_broken_file_with_exit_code_2_no_traceback_and_writes_nothing(tmp_path, name, text):
    incidents, runs, home = tmp_path / "incidents", tmp_path / "runs", tmp_path / "home"
    incidents.mkdir()
    (incidents / "ttft-after-deploy.yaml").write_text(text)
    env = dict(os.environ, SANDBOX_INCIDENTS=str(incidents), SANDBOX_RUNS=str(runs), SANDBOX_HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "sandbox.cli", "drill", "--list"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    assert f"{incidents / 'ttft-after-deploy.yaml'}:" in done.stderr
    assert not runs.exists() and not home.exists()
