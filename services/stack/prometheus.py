"""The Prometheus server a run starts (a real one), and a small client for its HTTP API."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx


class PrometheusError(RuntimeError):
    """Prometheus could not be started, or rejected a query."""


def find_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise PrometheusError(f"Prometheus server binary {name!r} not found: run scripts/setup.sh "
                              "(installs Debian's prometheus package) or set PROMETHEUS_BIN")
    return path


def start_server(binary: str, config_file: Path, data_dir: Path, listen: str, log_file: Path,
                 extra_args: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start Prometheus in its own session, so the caller's Ctrl-C does not kill it mid-teardown."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # Neither the lifecycle API (/-/quit, /-/reload) nor the admin API (delete series, snapshot): anyone on
    # loopback, a candidate too, could stop it or erase evidence mid-drill. The sandbox reloads its rules with
    # SIGHUP and keeps a run's data by copying the TSDB (copy_tsdb); the query API stays open and read-only.
    cmd = [binary, f"--config.file={config_file}", f"--storage.tsdb.path={data_dir}",
           f"--web.listen-address={listen}",
           "--storage.tsdb.retention.time=7d", "--log.level=warn", *extra_args]
    with open(log_file, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def copy_tsdb(data_dir: Path, dest: Path) -> Path:
    """A copy of a running Prometheus's TSDB, with no admin API: what a Prometheus opens as after a crash.

    Persisted blocks never change once written (one still being written, `*.tmp*`, is skipped: Prometheus
    removes those on start). The head is copied as the head's own crash recovery expects it: its memory-mapped
    chunks first, then the write-ahead log, so the log covers whatever the chunks' copy missed; a last WAL
    record cut short by the copy is dropped by the WAL's repair when the copy is opened. `dest` must not exist.
    """
    data_dir, dest = Path(data_dir), Path(dest)
    dest.mkdir(parents=True)
    skip = {"lock", "queries.active", "snapshots", "wal", "chunks_head"}
    for entry in sorted(data_dir.iterdir()):
        if entry.name in skip or ".tmp" in entry.name:
            continue
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name, ignore=shutil.ignore_patterns("*.tmp*"))
        else:
            shutil.copy2(entry, dest / entry.name)
    for name in ("chunks_head", "wal"):  # in this order
        if (data_dir / name).is_dir():
            shutil.copytree(data_dir / name, dest / name)
    return dest


class PrometheusClient:
    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def ready(self) -> bool:
        try:
            return self._http.get(f"{self.url}/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if time.monotonic() > deadline:
                raise PrometheusError(f"Prometheus at {self.url} not ready after {timeout_s:.0f}s")
            time.sleep(0.1)

    def _get(self, path: str, params: dict) -> dict:
        try:
            resp = self._http.get(f"{self.url}{path}", params=params)
        except httpx.HTTPError as e:
            raise PrometheusError(f"Prometheus at {self.url} unreachable: {e}") from None
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        if resp.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType', resp.status_code)}: {body.get('error', resp.text)}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """Instant query: [{"metric": {labels}, "value": [ts, "v"]}] (or a scalar/string result as one row)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = at
        data = self._get("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict]:
        return self._get("/api/v1/query_range", {"query": promql, "start": start, "end": end,
                                                 "step": step_s})["result"]

    def value(self, promql: str) -> float | None:
        """The single value of an instant query that returns one series (None if it returns none)."""
        rows = self.query(promql)
        if not rows:
            return None
        if len(rows) > 1:
            raise PrometheusError(f"{promql!r} returned {len(rows)} series, expected one")
        return float(rows[0]["value"][1])

    def targets(self) -> list[dict]:
        return self._get("/api/v1/targets", {"state": "active"})["activeTargets"]

    def alerts(self) -> list[dict]:
        """The rule manager's pending and firing alerts, as Prometheus lists them (read them typed through
        services.stack.alerts)."""
        return self._get("/api/v1/alerts", {})["alerts"]

    def rule_groups(self) -> list[dict]:
        """The rule groups Prometheus has loaded, with each rule's health."""
        return self._get("/api/v1/rules", {})["groups"]

    def label_names(self) -> list[str]:
        return self._get("/api/v1/labels", {})

    def label_values(self, label: str) -> list[str]:
        """Every value the label has (`__name__`: every metric name)."""
        return self._get(f"/api/v1/label/{label}/values", {})


