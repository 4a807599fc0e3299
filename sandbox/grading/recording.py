"""Recordings: a finished run packed as one file an interviewer can hand to every candidate.

    case.tar.gz
      <run-id>/run.json             the page, times, status                (readable)
      <run-id>/events.jsonl         traffic, deploys by version, the page   (readable)
      <run-id>/canary.log           the canary's own log                    (readable)
      <run-id>/prometheus/          the run's TSDB                          (readable)
      <run-id>/sealed/answer.bin    variant and answer key, Fernet-encrypted
    case.key                        the key, written beside the archive, never inside it

Holding the archive without the key reveals no more than the run directory's public files: the
answer is ciphertext. Unpacking refuses members that would land outside the destination.
"""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path

PUBLIC_FILES = ("run.json", "events.jsonl", "canary.log")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def key_path_for(archive: Path) -> Path:
    """case.tar.gz -> case.key (beside it)."""
    name = archive.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return archive.with_name(name[: -len(suffix)] + ".key")
    return archive.with_name(name + ".key")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def pack(run_dir: Path, key_file: Path, out: Path) -> Path:
    """Write `out` (a .tar.gz) from a finished run, and the key beside it; returns the key's path."""
    run_dir, out = Path(run_dir), Path(out)
    if not out.name.endswith(ARCHIVE_SUFFIXES):
        raise ValueError(f"--out must end in .tar.gz or .tgz, got {out.name!r}")
    for needed in ("run.json", "sealed/answer.bin", "prometheus"):
        if not (run_dir / needed).exists():
            raise ValueError(f"{run_dir} has no {needed}: not a finished run")
    key_out = key_path_for(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")  # never a half-written archive under the final name
    with tarfile.open(tmp, "w:gz") as tar:
        for name in PUBLIC_FILES:
            if (run_dir / name).is_file():
                tar.add(run_dir / name, arcname=f"{run_dir.name}/{name}")
        tar.add(run_dir / "sealed" / "answer.bin", arcname=f"{run_dir.name}/sealed/answer.bin")
        tar.add(run_dir / "prometheus", arcname=f"{run_dir.name}/prometheus")
    shutil.copyfile(key_file, key_out)
    os.chmod(key_out, 0o600)
    os.replace(tmp, out)
    return key_out


def unpack(archive: Path, dest_parent: Path | None = None) -> Path:
    """Extract a recording; returns its run directory (under dest_parent, or a new temporary one)."""
    archive = Path(archive)
    if not is_archive(archive):
        raise ValueError(f"{archive} is not a recording (.tar.gz)")
    dest = Path(dest_parent) if dest_parent else Path(tempfile.mkdtemp(prefix="sandbox-case-"))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            roots = {Path(m.name).parts[0] for m in members if m.name}
            if len(roots) != 1:
                raise ValueError(f"{archive} is not a recording: expected one run directory, found {sorted(roots)}")
            tar.extractall(dest, filter="data")  # refuses absolute paths, '..' and links out of dest
    except (tarfile.TarError, OSError) as e:
        raise ValueError(f"{archive} cannot be read as a recording: {e}") from None
    run_dir = dest / roots.pop()
    if not (run_dir / "run.json").is_file():
        raise ValueError(f"{archive} is not a recording: no run.json")
    return run_dir
