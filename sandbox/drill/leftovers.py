"""What `sandbox down` stops, and what `up` and a drill stop when they find a killed drill's leftovers: one list.

    faults           what a killed drill's faults changed outside the stack (a stopped process, a CPU quota
                     group), undone from its journal (faults/journal.py), first: a stopped replica ignores the
                     SIGTERM that stops the stack
    the stack        Ray, its Serve replicas, Prometheus, the traffic generators (Stack.down)
    a killed drill   its run.json says "killed" and its marker goes (record.close_killed_drill)
    a killed replay  its Prometheus, scratch copy and marker (grading.recorded.stop_left_replay)
    quota groups     empty CPU quota groups left by a drill killed before it wrote its journal
"""
from __future__ import annotations

from faults.cpu_throttle import remove_left_groups
from faults.journal import orphans, recover
from sandbox.drill.record import DRILL_FILE, close_killed_drill, running_drill
from sandbox.grading.recorded import left_replay, stop_left_replay
from services.stack.stack import Stack


def stop_all(cfg, steps, report: dict | None = None) -> dict:
    """Stop everything above; `report` is Stack.down()'s when the caller stopped the stack another way (the
    compose backend). Returns the report with what else was cleaned up added to `stopped`.

    The report counts the faults undone and names none: whoever runs `down` may be the candidate."""
    undone, failed = recover(cfg.keys_dir)
    report = dict(Stack(cfg, steps).down() if report is None else report)
    stopped = list(report.get("stopped", []))
    if undone:
        stopped.append(f"{len(undone)} change(s) a killed drill's faults had left")
        report["faults_undone"] = len(undone)
    if failed:
        report["faults_not_undone"] = len(failed)
        log = cfg.keys_dir / "faults-not-undone.log"  # private, beside the keys: the lines name the faults
        with open(log, "a") as f:
            f.writelines(line + "\n" for line in failed)
        steps.note(f"{len(failed)} change(s) a killed drill's faults left could not be undone: see {log}")
    if killed := close_killed_drill(cfg.home, cfg.keys_dir):  # its record says how it ended
        stopped.append("a killed drill's record")
        report["killed_drill"] = killed
    if replay := stop_left_replay(cfg.home):
        stopped.append(replay)
    if groups := remove_left_groups():
        stopped.append(f"{len(groups)} CPU quota group(s)")
        report["cgroups_removed"] = groups
    return {**report, "stopped": stopped}


def killed_drill_left(cfg) -> bool:
    """A drill ended without its clean-up (SIGKILL, the OOM killer): its marker names a process that is gone,
    or a journal of its faults is left."""
    marker = cfg.home / DRILL_FILE
    return (marker.is_file() and running_drill(cfg.home) is None) or bool(orphans(cfg.keys_dir))


def stop_killed_drill(cfg, steps) -> dict | None:
    """What a killed drill or replay left (its faults, the stack it ran on, its record, a replay's Prometheus)
    stopped as `down` would; None when there is nothing of the kind. A drill or `up` on that stack would start
    from its faults, and a replay's Prometheus holds the port the stack's wants."""
    return stop_all(cfg, steps) if killed_drill_left(cfg) or left_replay(cfg.home) is not None else None
