"""A drill's run directory: what the candidate may read, and the sealed answer beside it.

    runs/<run-id>/
      run.json          incident id, seed, times, the page, status        (candidate-visible)
      events.jsonl      the public timeline: traffic, deploys by version,  (candidate-visible)
                        the page, the end
      sealed/answer.bin variant, answer key, injection time, fault log    (encrypted; key elsewhere)
      prometheus/       a copy of the run's TSDB, written at the end

The key is written under the sandbox home (`keys/<run-id>.key`), not in the
run directory, so the directory can be handed to a candidate. Files are
replaced atomically: an interrupted drill leaves complete files, never halves.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from services.stack.prometheus import copy_tsdb


def write_atomic(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)


def read_live_marker(path: Path) -> dict | None:
    """A JSON marker file written by a running process ({"pid": ..., ...}), or None when it is gone or dead."""
    try:
        info = json.loads(Path(path).read_text())
        os.kill(info["pid"], 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info


def close_killed_drill(home: Path, keys_dir: Path) -> str | None:
    """The run of a drill that died without its clean-up (SIGKILL, a machine's OOM killer): its drill marker
    names a process that is gone. Its run.json says so (status "killed") and the marker goes; returns the
    run's directory, or None when no such drill is left."""
    marker = Path(home) / DRILL_FILE
    if not marker.is_file() or running_drill(home) is not None:
        return None
    try:
        info = json.loads(marker.read_text())
        record = RunRecord.open(Path(info["run_dir"]), keys_dir)
        if record.public().get("status") == "running":
            record.update_public(status="killed", ended=time.time(),
                                 error="the drill's process ended without its clean-up (killed); "
                                       "`sandbox down` stopped what it had started")
            record.event("drill ended", None, status="killed")
        run_dir = str(record.dir)
    except (OSError, ValueError, KeyError, TypeError):
        run_dir = None
    marker.unlink(missing_ok=True)
    return run_dir


def new_run_id() -> str:
    """The time (sortable) and a random tag (unique): nothing of the incident, which the candidate may
    learn only from the page (a run directory is in plain sight from the first second)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class RunRecord:
    def __init__(self, run_dir: Path, key_file: Path):
        self.dir = Path(run_dir)
        self.key_file = Path(key_file)
        self.run_file = self.dir / "run.json"
        self.events_file = self.dir / "events.jsonl"
        self.sealed_file = self.dir / "sealed" / "answer.bin"

    @classmethod
    def create(cls, runs_dir: Path, keys_dir: Path, run_id: str, public: dict) -> RunRecord:
        run_dir = Path(runs_dir) / run_id
        if run_dir.exists():
            raise FileExistsError(f"run directory {run_dir} already exists")
        rec = cls(run_dir, Path(keys_dir) / f"{run_id}.key")
        rec.dir.mkdir(parents=True)
        write_atomic(rec.key_file, Fernet.generate_key())
        os.chmod(rec.key_file, 0o600)
        rec.write_public({"run_id": run_id, **public})
        return rec

    @classmethod
    def open(cls, run_dir: Path, keys_dir: Path) -> RunRecord:
        run_dir = Path(run_dir)
        if not (run_dir / "run.json").is_file():
            raise FileNotFoundError(f"{run_dir} is not a drill run (no run.json)")
        return cls(run_dir, Path(keys_dir) / f"{run_dir.name}.key")

    # -- candidate-visible ---------------------------------------------------
    def public(self) -> dict:
        return json.loads(self.run_file.read_text())

    def write_public(self, data: dict) -> None:
        write_atomic(self.run_file, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def update_public(self, **changes) -> dict:
        data = {**self.public(), **changes}
        self.write_public(data)
        return data

    def event(self, kind: str, at_s: float | None = None, **fields) -> None:
        line = {"time": round(time.time(), 3), "kind": kind, **({"at_s": round(at_s, 1)} if at_s is not None else {}),
                **fields}
        with open(self.events_file, "a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")

    def events(self) -> list[dict]:
        if not self.events_file.is_file():
            return []
        return [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]

    # -- sealed ----------------------------------------------------------------
    def seal(self, data: dict) -> None:
        token = Fernet(self.key_file.read_bytes()).encrypt(json.dumps(data, sort_keys=True).encode())
        write_atomic(self.sealed_file, token)

    def unseal(self) -> dict:
        if not self.key_file.is_file():
            raise FileNotFoundError(f"no key for run {self.dir.name} (expected {self.key_file})")
        try:
            return json.loads(Fernet(self.key_file.read_bytes()).decrypt(self.sealed_file.read_bytes()))
        except (InvalidToken, ValueError):  # ValueError: not a Fernet key at all
            raise ValueError(f"{self.key_file} is not the key of run {self.dir.name}") from None

    # -- Prometheus data -------------------------------------------------------
    def keep_prometheus_data(self, data_dir: Path) -> Path:
        """Copy the running Prometheus's TSDB into the run directory (prometheus.copy_tsdb)."""
        dest = self.dir / "prometheus"
        if dest.exists():
            shutil.rmtree(dest)
        return copy_tsdb(data_dir, dest)


DRILL_FILE = "drill.json"  # in the sandbox home while a drill runs: its pid, run directory and mode


def running_drill(home: Path) -> dict | None:
    """The drill now running on this machine ({pid, run_dir, mode, started}), or None; home: the sandbox's."""
    return read_live_marker(Path(home) / DRILL_FILE)
