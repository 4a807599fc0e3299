"""The traffic generator's own metrics endpoint (prometheus-client), announced to Prometheus by file_sd.

While it runs, a file `targets/traffic-<pid>.json` in the run directory names
its address; Prometheus' `traffic` job picks it up within seconds, and `sandbox
down` finds the generator's pid in the file name. On close it lingers for two
scrape intervals, so the final counts are stored, then removes the file.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from services.serve import metric_names as names


def _free_port(host: str, first: int, tries: int = 50) -> int:
    from sandbox.canary.endpoint import free_port  # one port search for every metrics endpoint we serve

    return free_port(host, first, tries)


class TrafficExporter:
    def __init__(self, profile: str, host: str = "127.0.0.1", first_port: int = 9400,
                 targets_dir: Path | None = None, linger_s: float = 0.0):
        self.registry = CollectorRegistry()
        self.profile = profile
        labels = list(names.CLIENT_LABELS)
        reg = self.registry
        self.ttft = Histogram(names.CLIENT_TTFT.record_name, names.CLIENT_TTFT.help, labels,
                              buckets=names.CLIENT_TTFT.buckets, registry=reg)
        self.e2e = Histogram(names.CLIENT_E2E.record_name, names.CLIENT_E2E.help, labels,
                             buckets=names.CLIENT_E2E.buckets, registry=reg)
        self.requests = Counter(names.CLIENT_REQUESTS.record_name, names.CLIENT_REQUESTS.help,
                                labels + ["status"], registry=reg)
        self.output_tokens = Counter(names.CLIENT_OUTPUT_TOKENS.record_name, names.CLIENT_OUTPUT_TOKENS.help,
                                     labels, registry=reg)
        self.in_flight = Gauge(names.CLIENT_IN_FLIGHT.record_name, names.CLIENT_IN_FLIGHT.help, labels,
                               registry=reg)
        # The statuses a client commonly sees exist at 0 from the start: rate() cannot see the first
        # increment of a series that is born at 1, and that first error is the one that matters.
        for status in ("200", "499", "500", "503", "error"):
            self.requests.labels(profile, status)
        self.host = host
        self.port = _free_port(host, first_port)
        self._server, self._thread = start_http_server(self.port, addr=host, registry=reg)
        self.linger_s = linger_s
        self.target_file = None
        if targets_dir is not None:
            targets_dir.mkdir(parents=True, exist_ok=True)
            self.target_file = targets_dir / f"traffic-{os.getpid()}.json"
            tmp = self.target_file.with_suffix(".tmp")
            tmp.write_text(json.dumps([{"targets": [f"{host}:{self.port}"], "labels": {}}]))
            tmp.replace(self.target_file)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def started(self) -> None:
        self.in_flight.labels(self.profile).inc()

    def finished(self, status: str, e2e_s: float, ttft_s: float | None, output_tokens: int) -> None:
        p = self.profile
        self.in_flight.labels(p).dec()
        self.requests.labels(p, status).inc()
        if status == "200":
            self.e2e.labels(p).observe(e2e_s)
            if ttft_s is not None:
                self.ttft.labels(p).observe(ttft_s)
            if output_tokens:
                self.output_tokens.labels(p).inc(output_tokens)

    def close(self) -> None:
        if self.target_file is not None and self.linger_s > 0:
            time.sleep(self.linger_s)
        if self.target_file is not None:
            self.target_file.unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()
