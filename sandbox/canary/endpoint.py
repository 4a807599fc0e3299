"""Serve a metrics registry over HTTP and announce it to Prometheus with a file_sd target file.

While the endpoint is open, `<targets_dir>/canary-<pid>.json` names its
address: Prometheus' `canary` job scrapes it within seconds, and `sandbox
down` finds the prober's pid in the file name. On close the file goes (after
`linger_s`, so the last counts can be scraped first).
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

TARGET_PREFIX = "canary"


def free_port(host: str, first: int, tries: int = 50) -> int:
    for port in range(first, first + tries):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {first}..{first + tries - 1} for a metrics endpoint")


def target_file(targets_dir: Path, pid: int | None = None) -> Path:
    return Path(targets_dir) / f"{TARGET_PREFIX}-{pid or os.getpid()}.json"


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", first_port: int = 9450,
                 targets_dir: Path | None = None, linger_s: float = 0.0):
        self.host = host
        self.port = free_port(host, first_port)
        self._server, self._thread = start_http_server(self.port, addr=host, registry=registry)
        self.linger_s = linger_s
        self.target_file = None
        if targets_dir is not None:
            Path(targets_dir).mkdir(parents=True, exist_ok=True)
            self.target_file = target_file(targets_dir)
            tmp = self.target_file.with_suffix(".tmp")
            tmp.write_text(json.dumps([{"targets": [f"{host}:{self.port}"], "labels": {}}]))
            tmp.replace(self.target_file)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        if self.target_file is not None:
            if self.linger_s > 0:
                time.sleep(self.linger_s)
            self.target_file.unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()
