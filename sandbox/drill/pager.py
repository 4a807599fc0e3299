"""The page: the incident's alert firing in Prometheus after the injection (or, for a control drill, a
person's report at the injection), noticed once; alerts that fire before the injection are kept apart.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from services.stack.alerts import firing
from services.stack.prometheus import PrometheusClient, PrometheusError


class Pager:
    def __init__(self, prom: PrometheusClient, page_alert: str | None, report: str | None, inject_at_s: float,
                 on_page: Callable[[dict, float], None]):
        """on_page(page, t) runs once, when the page comes (t: seconds of traffic)."""
        self.prom, self.page_alert, self.report, self.inject_at_s = prom, page_alert, report, inject_at_s
        self.on_page = on_page
        self.page: dict | None = None
        self.early_alerts: list[dict] = []  # {at_s, alert}: what fired during the baseline

    def show_report(self, t: float) -> None:
        """A control drill pages by a person's report, not an alert."""
        self.page = {"alert": None, "summary": self.report, "description": "",
                     "active_at": None, "paged_at": time.time(), "at_s": round(t, 1)}
        self.on_page(self.page, t)

    def poll(self, t: float) -> None:
        try:
            now_firing = firing(self.prom)
        except PrometheusError:
            return
        for alert in now_firing:
            if t < self.inject_at_s:
                self.early_alerts.append({"at_s": round(t, 1), "alert": alert.name})
            if self.page is None and self.page_alert and alert.name == self.page_alert and t >= self.inject_at_s:
                self.page = {"alert": alert.name, "summary": alert.annotations.get("summary", ""),
                             "description": alert.annotations.get("description", ""),
                             "active_at": alert.active_since, "paged_at": time.time(), "at_s": round(t, 1)}
                self.on_page(self.page, t)
