"""The run directory: public files for the candidate, the answer sealed with a key kept elsewhere."""
import json
import os
import re
import subprocess
import sys

import pytest

from sandbox.drill.record import DRILL_FILE, RunRecord, close_killed_drill, new_run_id


def test_the_sealed_answer_reads_back_only_with_its_key(tmp_path):
    rec = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "r1", {"incident": "slow-replica"})
    rec.seal({"variant": "v", "answer": {"root_cause": "kernel-fallback"}})
    assert b"kernel-fallback" not in rec.sealed_file.read_bytes()
    assert RunRecord.open(rec.dir, tmp_path / "keys").unseal()["answer"]["root_cause"] == "kernel-fallback"
    assert not rec.key_file.is_relative_to(rec.dir)


def test_a_wrong_key_is_a_clear_error(tmp_path):
    a = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "a", {})
    b = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "b", {})
    a.seal({"x": 1})
    b.key_file.replace(a.key_file)
    with pytest.raises(ValueError, match="is not the key of run a"):
        a.unseal()


def test_public_files_hold_the_incident_and_events_but_not_the_variant(tmp_path):
    rec = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "r2", {"incident": "oom-at-peak", "seed": 3})
    rec.seal({"variant": "abort-path"})
    rec.event("deploy", 12.5, version="v2")
    rec.update_public(status="finished")
    public = json.loads((rec.dir / "run.json").read_text())
    assert public == {"run_id": "r2", "incident": "oom-at-peak", "seed": 3, "status": "finished"}
    assert [e["kind"] for e in rec.events()] == ["deploy"] and rec.events()[0]["at_s"] == 12.5
    visible = "".join(p.read_text() for p in rec.dir.glob("*.json*"))
    assert "abort-path" not in visible


def test_an_existing_run_directory_is_never_overwritten(tmp_path):
    RunRecord.create(tmp_path / "runs", tmp_path / "keys", "same", {})
    with pytest.raises(FileExistsError):
        RunRecord.create(tmp_path / "runs", tmp_path / "keys", "same", {})


def test_a_run_id_is_the_time_and_a_random_tag_and_names_no_incident():
    ids = {new_run_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids), ids


def _marker(home, pid: int, run_dir) -> None:
    (home / DRILL_FILE).write_text(json.dumps({"pid": pid, "run_dir": str(run_dir), "mode": "drill"}))


def test_a_killed_drills_run_is_closed_as_killed_and_its_marker_removed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    rec = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "r1", {"status": "running", "page": None})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid nobody has any more: the drill that was SIGKILLed
    _marker(home, gone.pid, rec.dir)
    assert close_killed_drill(home, tmp_path / "keys") == str(rec.dir)
    public = rec.public()
    assert public["status"] == "killed" and public["ended"] > 0 and "killed" in public["error"]
    assert not (home / DRILL_FILE).exists()
    assert close_killed_drill(home, tmp_path / "keys") is None  # once


def test_a_live_drill_and_a_finished_run_are_left_alone(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    rec = RunRecord.create(tmp_path / "runs", tmp_path / "keys", "r2", {"status": "running", "page": None})
    _marker(home, os.getpid(), rec.dir)  # alive: a drill at work
    assert close_killed_drill(home, tmp_path / "keys") is None and (home / DRILL_FILE).exists()
    rec.update_public(status="ended")
    (home / DRILL_FILE).unlink()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _marker(home, gone.pid, rec.dir)
    close_killed_drill(home, tmp_path / "keys")
    assert rec.public()["status"] == "ended"  # it had said how it ended
