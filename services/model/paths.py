"""Where the shipped weights live (trained by `services.model.train`)."""
from __future__ import annotations

import os
from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def target_path() -> Path:
    return Path(os.environ.get("SANDBOX_TARGET_MODEL", WEIGHTS_DIR / "target"))


def draft_path() -> Path:
    return Path(os.environ.get("SANDBOX_DRAFT_MODEL", WEIGHTS_DIR / "draft"))
