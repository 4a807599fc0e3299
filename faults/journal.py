"""What a drill's faults changed outside the stack's processes, written down before each change, so that a
drill killed before its revert (SIGKILL, the OOM killer) is undone by the next `sandbox up`, `drill` or `down`.

    journal = FaultJournal(keys_dir / f"{run_id}{SUFFIX}")   # owned by this process
    ctx = FaultContext(cfg, state, rng, journal=journal)
    fault.inject(ctx)        # the fault writes its undo record (ctx.remember) before each change it makes
    fault.revert(ctx)        # its entry goes (ctx.forget); the file goes with the last one
    recover(keys_dir)        # the journals of processes that are gone: every record restored, the file removed

A fault whose changes all live in the stack's processes (a deploy, a replica override, a container node's
limits: the node is removed with the stack) has no record: stopping the stack undoes it. A stopped process
and a CPU quota group outlive the drill that made them, so theirs are written. The journal lies beside the
runs' keys, never in a run directory: it names the fault, which the candidate may not read.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from faults.registry import FAULT_TYPES
from faults.replicas import start_ticks

if TYPE_CHECKING:
    from faults.base import Fault

SUFFIX = ".faults.json"


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with a file only this user can read (a kill mid-write leaves the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass
class FaultJournal:
    """One drill's journal: its owner (this process, by pid and start time) and one undo record per fault."""
    path: Path
    _entries: dict[int, dict] = field(default_factory=dict, init=False, repr=False)

    def remember(self, fault: Fault) -> None:
        """Write (or rewrite) the fault's undo record; call it before the change the record undoes."""
        record = fault.undo_record()
        if record is None:
            return
        self._entries[id(fault)] = {"type": fault.type, "undo": record}
        self._save()

    def forget(self, fault: Fault) -> None:
        """The fault is reverted: its record goes, and the file with the last one."""
        if self._entries.pop(id(fault), None) is None:
            return
        if self._entries:
            self._save()
        else:
            self.path.unlink(missing_ok=True)

    def _save(self) -> None:
        pid = os.getpid()
        _write_private(self.path, json.dumps({"owner": {"pid": pid, "start_ticks": start_ticks(pid)},
                                              "entries": list(self._entries.values())}, sort_keys=True))


def _owner_alive(owner: dict) -> bool:
    try:
        return start_ticks(int(owner["pid"])) == owner["start_ticks"]
    except (KeyError, TypeError, ValueError):
        return False


def _read(path: Path) -> dict:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("owner"), dict) or not isinstance(data.get("entries"), list):
        raise ValueError("not a fault journal")
    return data


def orphans(journal_dir: Path) -> list[Path]:
    """The journals in `journal_dir` whose owner is gone (an unreadable one counts: its owner is unknown)."""
    found = []
    for path in sorted(Path(journal_dir).glob(f"*{SUFFIX}")):
        try:
            if not _owner_alive(_read(path)["owner"]):
                found.append(path)
        except (OSError, ValueError):
            found.append(path)
    return found


def recover(journal_dir: Path) -> tuple[list[str], list[str]]:
    """Undo what every journal in `journal_dir` whose owner is gone still records; each such journal goes.

    Returns (what was undone, what could not be), a line each; the journal of a live drill is left alone.
    Restores are safe to repeat: a drill killed in the middle of its own revert is undone again from its record.
    """
    undone: list[str] = []
    failed: list[str] = []
    for path in orphans(journal_dir):
        try:
            entries = _read(path)["entries"]
        except (OSError, ValueError) as e:
            failed.append(f"{path.name}: unreadable ({e}); removed")
            path.unlink(missing_ok=True)
            continue
        for entry in reversed(entries):  # newest first, as a revert goes
            cls = FAULT_TYPES.get(entry.get("type")) if isinstance(entry, dict) else None
            if cls is None:
                failed.append(f"{path.name}: an entry of no known fault type: {entry!r}")
                continue
            try:
                undone.extend(cls.restore(entry["undo"]))
            except Exception as e:  # noqa: BLE001 - try every record; say which failed
                failed.append(f"{path.name}: {cls.type}: {type(e).__name__}: {e}")
        path.unlink(missing_ok=True)
    return undone, failed
