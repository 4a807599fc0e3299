"""Where the shipped weights live (trained by `services.model.train`)."""
from __future__ import annotations

import os
from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def target_path() -> Path:
    return Path(os.environ.get("SANDBOX_TARGET_MODEL", WEIGHTS_DIR / "target"))


def draft_path() -> Path:
    return Path(os.environ.get("SANDBOX_DRAFT_MODEL", WEIGHTS_DIR / "draft"))


def early_draft_path() -> Path:
    """The draft's architecture and tokenizer after only 100 training steps: a
    real draft that agrees with the target far less often (an early checkpoint
    shipped by mistake)."""
    return Path(os.environ.get("SANDBOX_EARLY_DRAFT_MODEL", WEIGHTS_DIR / "draft-early"))


GENERATION_DIR = Path(__file__).resolve().parent / "generation"


def generation_config_path(name: str) -> Path:
    """A shipped generation config directory (services/model/generation/README.md)."""
    return GENERATION_DIR / name
