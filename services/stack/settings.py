"""Where the sandbox keeps its state and which ports it uses: one validated dataclass.

Every field can be set from the environment (`SANDBOX_<FIELD>`, e.g.
`SANDBOX_API_PORT=8001`, `SANDBOX_HOME=/tmp/sb`); `PROMETHEUS_BIN` names the
Prometheus server binary. The test suite runs its stack on other ports and
another home, so it never touches a sandbox a person left running.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _default_home() -> Path:
    return REPO_ROOT / "runs" / "sandbox"


def _default_runs() -> Path:
    return REPO_ROOT / "runs"


def _default_incidents() -> Path:
    return REPO_ROOT / "incidents"


def _default_serve_config() -> Path:
    return REPO_ROOT / "services" / "serve_config.yaml"


_PORTS = ("ray_port", "dashboard_port", "metrics_export_port", "api_port", "prometheus_port", "traffic_port")


@dataclass
class SandboxConfig:
    home: Path = field(default_factory=_default_home)  # state.json and one directory per run
    runs: Path = field(default_factory=_default_runs)  # one directory per drill: runs/<run-id>/
    incidents: Path = field(default_factory=_default_incidents)  # the catalogue of incident scripts
    serve_config: Path = field(default_factory=_default_serve_config)
    host: str = "127.0.0.1"  # everything binds and is scraped on loopback
    ray_port: int = 6379
    dashboard_port: int = 8265
    metrics_export_port: int = 8080  # Ray's per-node metrics endpoint
    api_port: int = 8000  # the OpenAI-compatible API (Serve's HTTP proxy)
    prometheus_port: int = 9090
    traffic_port: int = 9400  # first port tried for a traffic generator's metrics endpoint
    scrape_interval_s: float = 1.0
    # How often Ray workers push metrics to the node's agent (Ray's default is 10 s). Ray's agent drops
    # a gauge not refreshed for two intervals, so this must stay above a busy replica's export jitter.
    metrics_report_interval_ms: int = 1000
    ray_num_cpus: int = 4  # logical CPUs Ray may hand out (replicas ask for 1 each)
    prometheus_bin: str = "prometheus"
    up_timeout_s: float = 180.0
    # Multiplies the length of every phase of a capacity calibration (sandbox/calibration): the test
    # suite measures on short sweeps; 1 is what the knees and thresholds are judged by.
    calibration_scale: float = 1.0

    def __post_init__(self):
        self.home = Path(self.home)
        self.runs = Path(self.runs)
        self.incidents = Path(self.incidents)
        self.serve_config = Path(self.serve_config)
        for name in _PORTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
                raise ValueError(f"{name} must be a TCP port (1-65535), got {value!r}")
        ports = [getattr(self, name) for name in _PORTS]
        if len(set(ports)) != len(ports):
            raise ValueError(f"ports must differ: {dict(zip(_PORTS, ports))}")
        if not isinstance(self.scrape_interval_s, (int, float)) or not 0.2 <= self.scrape_interval_s <= 60:
            raise ValueError(f"scrape_interval_s must be in [0.2, 60], got {self.scrape_interval_s!r}")
        if not isinstance(self.metrics_report_interval_ms, int) or self.metrics_report_interval_ms < 100:
            raise ValueError(f"metrics_report_interval_ms must be an int >= 100, got {self.metrics_report_interval_ms!r}")
        if not isinstance(self.ray_num_cpus, int) or self.ray_num_cpus < 1:
            raise ValueError(f"ray_num_cpus must be a positive integer, got {self.ray_num_cpus!r}")
        if not isinstance(self.calibration_scale, (int, float)) or not 0.1 <= self.calibration_scale <= 5:
            raise ValueError(f"calibration_scale must be in [0.1, 5], got {self.calibration_scale!r}")
        if not isinstance(self.up_timeout_s, (int, float)) or self.up_timeout_s <= 0:
            raise ValueError(f"up_timeout_s must be a positive number, got {self.up_timeout_s!r}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> SandboxConfig:
        env = os.environ if env is None else env
        values: dict = {}
        for f in fields(cls):
            raw = env.get(f"SANDBOX_{f.name.upper()}")
            if raw is None:
                continue
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            try:
                values[f.name] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
            except ValueError:
                raise ValueError(f"SANDBOX_{f.name.upper()} must be a {kind}, got {raw!r}") from None
        if env.get("PROMETHEUS_BIN"):
            values["prometheus_bin"] = env["PROMETHEUS_BIN"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def keys_dir(self) -> Path:
        """Keys of sealed drill answers, kept apart from the run directories a candidate reads."""
        return self.home / "keys"

    @property
    def state_file(self) -> Path:
        return self.home / "state.json"

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"
