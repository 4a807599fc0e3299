"""The actions `sandbox mitigate` offers, as data: one per remediation id of the taxonomy (incidents/taxonomy.py),
with what it does in a line. Light on purpose: `sandbox --help` reads it without loading the stack's code."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SettingChange:
    action: str
    settings: tuple[str, ...]  # EngineConfig fields the action puts back as known-good (a drill's baseline, else shipped)
    # "up" | "down": the value must move that way; "back": it must differ; "reset": a new version even where the
    # deployed config has it already (every replica is replaced, and with it a replica's own settings)
    direction: str


SETTING_CHANGES: dict[str, SettingChange] = {c.action: c for c in (
    SettingChange("enable-prefix-caching", ("enable_prefix_caching",), "back"),
    SettingChange("raise-prefill-budget", ("max_num_batched_tokens",), "up"),
    SettingChange("lower-max-num-seqs", ("max_num_seqs",), "down"),
    SettingChange("lower-memory-utilization", ("gpu_memory_utilization",), "down"),
    SettingChange("raise-kv-cache", ("num_gpu_blocks",), "reset"),
    SettingChange("enable-batch-invariance", ("batch_invariant",), "back"),
    SettingChange("honor-seed", ("sampler_impl",), "back"),
    SettingChange("requantize-finer", ("quantization", "quantization_granularity", "quantization_group_size"),
                  "back"),
)}


@dataclass(frozen=True)
class Action:
    id: str
    help: str
    replica: bool = False  # needs --replica
    version: bool = False  # takes --version
    limit: bool = False  # takes --limit


ACTIONS: dict[str, Action] = {a.id: a for a in (
    Action("rollback-deploy", "a rolling deploy back to the version before the current one (or --version)",
           version=True),
    Action("restart-replica", "Serve replaces the replica's process (--replica: its id, the metrics' label)",
           replica=True),
    Action("drain-replica", "Serve routes the replica nothing new, lets its requests finish and replaces it "
                            "(slower than a restart; nothing in flight is lost; off its machine where it has "
                            "one of its own)", replica=True),
    Action("scale-out", "one more replica, where the machine has a core free for its thread (says so where none is)"),
    Action("shed-load", "an admission limit at the ingress: requests over --limit in flight get a 429 "
                        "(default: the most the engines held at once in the drill's healthy baseline)", limit=True),
    Action("raise-cpu-limit", "lift the CPU quota of every replica's cgroup"),
    *(Action(a, f"a new version with engine.{', engine.'.join(c.settings)} as the fleet ran them when healthy "
                "(a drill's baseline; else as shipped)")
      for a, c in SETTING_CHANGES.items()),
    Action("no-action", "change nothing (ends the mitigation phase)"),
)}
