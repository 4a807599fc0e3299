"""What `sandbox down` stops, and what a drill stops when it finds a killed drill's stack: one list.

    the stack        Ray, its Serve replicas, Prometheus, the traffic generators (Stack.down)
    a killed drill   its run.json says "killed" and its marker goes (record.close_killed_drill)
    quota groups     the CPU quota groups a drill killed mid-fault leaves outside the processes stopped
"""
from __future__ import annotations

from faults.cpu_throttle import remove_left_groups
from sandbox.drill.record import close_killed_drill
from services.stack.stack import Stack


def stop_all(cfg, steps, report: dict | None = None) -> dict:
    """Stop everything above; `report` is Stack.down()'s when the caller stopped the stack another way (the
    compose backend). Returns the report with what else was cleaned up added to `stopped`."""
    report = dict(Stack(cfg, steps).down() if report is None else report)
    if killed := close_killed_drill(cfg.home, cfg.keys_dir):  # its record says how it ended
        report = {**report, "stopped": [*report.get("stopped", []), "a killed drill's record"], "killed_drill": killed}
    if groups := remove_left_groups():
        report = {**report, "stopped": [*report.get("stopped", []), f"{len(groups)} CPU quota group(s)"],
                  "cgroups_removed": groups}
    return report
