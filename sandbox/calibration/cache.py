"""Calibrations kept per machine, serve config and catalogue: `<home>/calibration/<digest>.json`.

The key names what a calibration measured, so a change to any part of it means a new sweep:

    machine    CPU model, the CPUs this process may run on (taskset, cgroup quota), memory,
               whether a GPU is present: what the stack's replicas inherit
    serve      the deployed Serve config (replicas, engine settings), less its version label: a stack
               whose last deploy was reverted serves as the one before it did
    catalogue  every incident file, the traffic profiles, the sweep's settings and its code (a change
               to how capacity is measured or thresholds derived is a new measurement)

A file that does not parse or does not hold a whole calibration is corrupt: it is reported,
removed and measured again, never trusted. Writes are atomic (a temporary file renamed).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import yaml

from sandbox.calibration.capacity import Calibration, CalibrationError
from sandbox.calibration.sweep_point import SweepConfig
from services.engine.config import EngineConfig
from services.serve.admission import IngressSettings
from services.serve.config import ReplicaKnobs, ServeAppConfig
from services.stack.deploy_config import INGRESS
from services.stack.settings import REPO_ROOT

PROFILES_FILE = REPO_ROOT / "incidents" / "profiles.py"
METHOD_FILES = tuple(Path(__file__).parent / name for name in ("sweep.py", "sweep_point.py", "calibrator.py", "thresholds.py"))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read(Path("/proc/cpuinfo")).splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpu_quota() -> str:
    """The cgroup's CPU limit (v2 `cpu.max`, v1 quota/period), '' when there is none to read."""
    v2 = _read(Path("/sys/fs/cgroup/cpu.max"))
    if v2:
        return v2
    quota, period = _read(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")), _read(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    return f"{quota} {period}".strip()


def machine() -> dict:
    mem = next((line.split()[1] for line in _read(Path("/proc/meminfo")).splitlines()
                if line.startswith("MemTotal")), "")
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"cpu": _cpu_model(), "cpus": os.cpu_count(), "affinity": affinity, "cpu_quota": _cpu_quota(),
            "mem_kb": mem, "gpu": Path("/dev/nvidia0").exists(), "arch": platform.machine()}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def catalogue_digest(incidents_dir: Path, sweep: SweepConfig) -> str:
    parts = [f"{p.name}\n{_read(p)}" for p in sorted(Path(incidents_dir).glob("*.yaml"))]
    method = [_read(path) for path in METHOD_FILES]
    return digest("\n---\n".join([*parts, _read(PROFILES_FILE), *method, json.dumps(asdict(sweep), sort_keys=True)]))


def _defaults(cls) -> dict:
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def _without_defaults(args: dict, defaults: dict) -> dict:
    """The settings that differ from their defaults: a deploy back to a default (`speculative_model=null`)
    writes the key the original config left out, and serves the same."""
    return {k: v for k, v in args.items() if not (k in defaults and defaults[k] == v)}


def serve_digest(serve_config: Path) -> str:
    text = _read(Path(serve_config))
    try:
        data = yaml.safe_load(text)
        for app in data.get("applications", []):
            args = app.get("args", {})
            args.pop("version", None)
            if isinstance(args.get("engine"), dict):
                args["engine"] = _without_defaults(args["engine"], _defaults(EngineConfig))
            app["args"] = _without_defaults(args, {k: v for k, v in _defaults(ServeAppConfig).items()
                                                   if k != "engine"})
            for deployment in app.get("deployments", []):
                if isinstance(deployment.get("user_config"), dict):  # runtime settings: the replicas' knobs,
                    # the ingress's admission limit; at their defaults (a limit set and lifted) they serve the same
                    kind = IngressSettings if deployment.get("name") == INGRESS else ReplicaKnobs
                    deployment["user_config"] = _without_defaults(deployment["user_config"], _defaults(kind))
                    if not deployment["user_config"]:
                        del deployment["user_config"]
        text = json.dumps(data, sort_keys=True, default=str)
    except (yaml.YAMLError, AttributeError, TypeError):
        pass  # not the config we write: its text is the key
    return digest(text)


def key(serve_config: Path, incidents_dir: Path, sweep: SweepConfig, profiles: list[str]) -> dict:
    return {"machine": machine(), "serve": serve_digest(serve_config),
            "catalogue": catalogue_digest(incidents_dir, sweep), "profiles": sorted(profiles)}


def path_for(home: Path, k: dict) -> Path:
    return Path(home) / "calibration" / f"{digest(json.dumps(k, sort_keys=True))}.json"


def load(home: Path, k: dict) -> tuple[Calibration | None, str | None]:
    """(the cached calibration for key k, None) or (None, why there is none usable)."""
    path = path_for(home, k)
    if not path.exists():
        return None, "no calibration for this machine, serve config and catalogue yet"
    try:
        cal = Calibration.from_dict(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, CalibrationError) as e:
        path.unlink(missing_ok=True)
        return None, f"the cached calibration {path} is corrupt ({e}); measuring again"
    if cal.key != k:  # a digest collision or a hand-edited file: not this key's measurement
        path.unlink(missing_ok=True)
        return None, f"the cached calibration {path} was made for another key; measuring again"
    return cal, None


def save(home: Path, cal: Calibration) -> Path:
    path = path_for(home, cal.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cal.to_dict(), indent=1))
    tmp.replace(path)
    return path
