"""The grader on recorded runs of the catalogue (pruned fixtures) and the golden diagnoses beside each.

Fixtures: tests/grading/fixtures/<run-id>/ (run.json, events.jsonl, sealed/answer.bin, prometheus/,
golden/*.yaml) with <run-id>.key beside it; made from `sandbox verify` runs by
`python -m sandbox.grading.prune RUN tests/grading/fixtures` and `python tests/grading/golden.py FIXTURE`.
"""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from incidents.schema import load_catalogue
from sandbox.grading.diagnosis import load_diagnosis
from sandbox.grading.grader import Grader
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun
from sandbox.grading.recording import pack, unpack
from services.stack.prometheus import PrometheusError, find_binary

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
RUNS = sorted(p for p in FIXTURES.glob("*") if p.is_dir())

try:
    find_binary("prometheus")
except PrometheusError:
    pytest.skip("needs Debian's prometheus (scripts/setup.sh installs it)", allow_module_level=True)


def key_of(run: Path) -> Path:
    return run.parent / f"{run.name}.key"


def grade_golden(run: Path) -> dict[str, int]:
    recorded = RecordedRun(run, key_of(run))
    incident = load_catalogue(ROOT / "incidents")[recorded.incident_id]
    scores = {}
    with RecordedPrometheus(run / "prometheus") as prom:
        grader = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], recorded.windows(), prom)
        for path in sorted((run / "golden").glob("*.yaml")):
            scores[path.stem] = grader.grade(load_diagnosis(path)).score
    return scores


# Recordings are made from runs that pass `sandbox verify` (pruned with sandbox.grading.prune).
def test_every_variant_of_the_catalogue_has_a_recorded_fixture():
    catalogue = load_catalogue(ROOT / "incidents")
    have = {(RecordedRun(r, key_of(r)).incident_id, RecordedRun(r, key_of(r)).sealed["variant"]) for r in RUNS}
    want = {(i.id, v) for i in catalogue.values() for v in i.variants}
    assert want - have == set(), f"no fixture for {sorted(want - have)}"


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_golden_diagnoses_score_in_their_bands(run):
    s = grade_golden(run)
    # the same evidence in other forms (server or client side, mean or quantile, per replica or fleet) scores the same
    assert s["good"] >= 80 and s["other-forms"] >= 80 and abs(s["good"] - s["other-forms"]) <= 5, s
    assert s["no-evidence"] <= 50, s
    assert s["irrelevant-evidence"] <= 55 and s.get("wrong-reason", 0) <= 55, s
    assert max(s["wrong-cause"], s["decoy"], s.get("wrong-replica", 0)) <= 35, s
    assert s["good"] >= s["no-evidence"] + 30, s  # a correct cause that shows nothing scores well below


def test_every_golden_kind_is_written_for_every_fixture():
    kinds = {"good", "other-forms", "no-evidence", "irrelevant-evidence", "wrong-cause", "decoy"}
    assert [r.name for r in RUNS if not kinds <= {p.stem for p in (r / "golden").glob("*.yaml")}] == []


def _cli(*args, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SANDBOX_HOME": str(home), "SANDBOX_PROMETHEUS_PORT": "19490"}
    return subprocess.run([sys.executable, "-m", "sandbox.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env=env)


def test_grading_twice_gives_the_same_bytes(tmp_path):
    run = RUNS[0]
    args = ("grade", str(run), "--key", str(key_of(run)), "-d", str(run / "golden" / "good.yaml"), "--json",
            "--no-debrief")
    first, second = _cli(*args, home=tmp_path / "home"), _cli(*args, home=tmp_path / "home")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["score"] >= 90


def test_a_diagnosis_of_another_run_is_refused_with_exit_2(tmp_path):
    run = RUNS[0]
    other = tmp_path / "d.yaml"
    other.write_text((run / "golden" / "good.yaml").read_text().replace(run.name, "20200101-000000-elsewhere"))
    result = _cli("grade", str(run), "--key", str(key_of(run)), "-d", str(other), home=tmp_path / "home")
    assert result.returncode == 2 and "run:" in result.stderr


def test_a_recording_does_not_reveal_its_answer_without_the_key(tmp_path):
    run = RUNS[0]
    answer = RecordedRun(run, key_of(run)).sealed
    archive = tmp_path / "case.tar.gz"
    key = pack(run, key_of(run), archive)
    assert key == tmp_path / "case.key"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert not any(n.endswith(".key") for n in names)
    # The variant id as a value ("draft" is also a word of vLLM's metric names, which the data holds)
    # and the root-cause id anywhere.
    for secret in (f'"{answer["variant"]}"', answer["answer"]["root_cause"]):
        assert secret.encode() not in blob
    unpacked = unpack(archive, tmp_path / "out")
    (tmp_path / "wrong.key").write_bytes(b"A" * 43 + b"=")
    with pytest.raises(ValueError, match="not the key"):
        RecordedRun(unpacked, tmp_path / "wrong.key")
    assert RecordedRun(unpacked, key).sealed == answer


def test_a_replay_answers_its_first_query_within_5_seconds(tmp_path):
    run = RUNS[0]
    archive = tmp_path / "case.tar.gz"
    pack(run, key_of(run), archive)
    result = _cli("replay", str(archive), "--once", "--json", home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["ready_s"] <= 5.0


def _replay_ended_by(signum: int, tmp_path: Path, port: int) -> tuple[dict, dict]:
    """A replay of the first fixture on `port`, sent `signum` once it serves: (its marker, the env it ran with)."""
    run, home = RUNS[0], tmp_path / "home"
    archive = tmp_path / "case.tar.gz"
    pack(run, key_of(run), archive)
    env = {**os.environ, "SANDBOX_HOME": str(home), "SANDBOX_PROMETHEUS_PORT": str(port)}
    replay = subprocess.Popen([sys.executable, "-m", "sandbox.cli", "replay", str(archive)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (home / "replay.json").is_file():
            assert replay.poll() is None and time.monotonic() < deadline, replay.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        marker = json.loads((home / "replay.json").read_text())
        os.kill(replay.pid, signum)
        replay.wait(timeout=30)
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGKILL)
    return marker, env


def test_a_replay_ended_by_sigterm_leaves_no_prometheus_no_marker_and_a_free_port(tmp_path):
    from services.stack.ports import listening_ports

    marker, _ = _replay_ended_by(signal.SIGTERM, tmp_path, 19491)
    assert not (tmp_path / "home" / "replay.json").exists()
    assert 19491 not in listening_ports()
    left = [p for p in Path("/proc").glob("[0-9]*") if marker["run_dir"] in _cmdline(p)]
    assert left == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_grading_a_recording_writes_the_debrief_beside_it(tmp_path):
    run = RUNS[0]
    archive = tmp_path / "case.tar.gz"
    pack(run, key_of(run), archive)
    result = _cli("grade", str(archive), "-d", str(run / "golden" / "good.yaml"), "--json", home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    debrief = Path(json.loads(result.stdout)["debrief"])
    assert debrief.is_file() and debrief.with_suffix(".html").is_file()
    assert list(debrief.parent.glob("*.png"))
    assert "## Score" in debrief.read_text()


def test_a_replay_killed_outright_is_cleaned_up_by_sandbox_down(tmp_path):
    from services.stack.ports import listening_ports

    # no clean-up at all: its Prometheus, in a session of its own, stays
    marker, env = _replay_ended_by(signal.SIGKILL, tmp_path, 19492)
    assert 19492 in listening_ports() and Path(marker["scratch"]).is_dir()
    down = subprocess.run([sys.executable, "-m", "sandbox.cli", "down", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert f"a killed replay's Prometheus (pid {marker['prometheus_pid']})" in json.loads(down.stdout)["stopped"]
    assert 19492 not in listening_ports() and not (tmp_path / "home" / "replay.json").exists()
    assert not Path(marker["scratch"]).exists()
