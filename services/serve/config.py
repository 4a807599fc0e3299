"""What a deployment is told: the application's arguments and the replicas' runtime knobs.

`ServeAppConfig` is the application's `args` in `services/serve_config.yaml`:
changing it changes Ray Serve's code version, so every replica is replaced in
a rolling update and the new `version` label shows in every engine metric.
`ReplicaKnobs` is the LLMServer's `user_config`: changing it calls
`reconfigure()` on the running replicas, with no restart.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from services.engine.config import EngineConfig
from services.model.paths import draft_path, early_draft_path, generation_config_path, target_path

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _engine_fields() -> set[str]:
    from services.engine.config import EngineConfig  # torch-free module

    return {f.name for f in fields(EngineConfig)}


def _check_name(name: str, value) -> None:
    if not isinstance(value, str) or not _LABEL_VALUE.match(value):
        raise ValueError(f"{name} must be a non-empty name of letters, digits, '.', '_' or '-', got {value!r}")


# engine.torch_threads: ALL_CPUS runs as many compute threads as the replica's process may use CPUs, what
# an unset OMP_NUM_THREADS gives every process: each replica sized as if it had the machine to itself.
ALL_CPUS = "all"


def torch_threads(value) -> int | None:
    """The thread count `engine.torch_threads` names: a positive integer, ALL_CPUS, or None (torch's own)."""
    if value == ALL_CPUS:
        return len(os.sched_getaffinity(0))
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"engine.torch_threads must be a positive integer or {ALL_CPUS!r}, got {value!r}")
    return value


def _positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


@dataclass
class ServeAppConfig:
    model_name: str = "sandbox-llama"
    version: str = "v1"
    # EngineConfig fields; `model` left out means the shipped target weights.
    engine: dict = field(default_factory=dict)
    # max_tokens for a chat completion that names none (completions default to 16, as OpenAI's).
    default_max_tokens: int = 64
    # The engine loop counts as wedged when it has work but has not stepped for this long.
    wedge_timeout_s: float = 30.0

    def __post_init__(self):
        _check_name("model_name", self.model_name)
        _check_name("version", self.version)
        if not isinstance(self.engine, dict):
            raise ValueError(f"engine must be a mapping of EngineConfig fields, got {self.engine!r}")
        unknown = sorted(set(self.engine) - _engine_fields())
        if unknown:
            raise ValueError(f"engine: unknown EngineConfig field(s) {', '.join(unknown)}")
        torch_threads(self.engine.get("torch_threads", 1))
        if isinstance(self.default_max_tokens, bool) or not isinstance(self.default_max_tokens, int) \
                or self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be a positive integer, got {self.default_max_tokens!r}")
        _positive_number("wedge_timeout_s", self.wedge_timeout_s)

    @classmethod
    def from_dict(cls, data: dict | None) -> ServeAppConfig:
        data = dict(data or {})
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown application argument(s) {', '.join(unknown)}")
        return cls(**data)

    def engine_config(self):
        """The replica's EngineConfig (validated there, where the weights are)."""
        kwargs = {"torch_threads": 1, **self.engine}
        kwargs["torch_threads"] = torch_threads(kwargs["torch_threads"])
        kwargs["model"] = str(kwargs.get("model") or target_path())
        if kwargs.get("speculative_model") in SHIPPED_DRAFTS:  # a shipped checkpoint, by name
            kwargs["speculative_model"] = str(SHIPPED_DRAFTS[kwargs["speculative_model"]]())
        if kwargs.get("generation_config") in SHIPPED_GENERATION_CONFIGS:  # shipped, by name
            kwargs["generation_config"] = str(generation_config_path(kwargs["generation_config"]))
        return EngineConfig(**kwargs)

    def to_dict(self) -> dict:
        return asdict(self)


def _draft():
    return draft_path()


def _early_draft():
    return early_draft_path()


# Checkpoints in the repo that a deploy may name instead of a path (engine.speculative_model=draft).
SHIPPED_DRAFTS = {"draft": _draft, "draft-early": _early_draft}
# Generation configs in the repo that a deploy may name (services/model/generation/README.md).
SHIPPED_GENERATION_CONFIGS = ("instruct",)


@dataclass
class ReplicaKnobs:
    """Runtime knobs; None keeps what the deployed engine config says."""
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    # Off only to measure what exporting metrics costs (bench/serving.py).
    export_metrics: bool = True

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.enable_prefix_caching is not None and not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be true or false, got {self.enable_prefix_caching!r}")
        if not isinstance(self.export_metrics, bool):
            raise ValueError(f"export_metrics must be true or false, got {self.export_metrics!r}")

    @classmethod
    def from_dict(cls, data: dict | None) -> ReplicaKnobs:
        data = dict(data or {})
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"user_config: unknown knob(s) {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict:
        return asdict(self)


def default_config_path() -> Path:
    """`services/serve_config.yaml`: the single source of deployment settings."""
    return Path(__file__).resolve().parents[1] / "serve_config.yaml"
