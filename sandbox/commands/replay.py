"""`sandbox record` and `sandbox replay`: one headless run packed as a file; served back read-only."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import json
import os
import shutil
import time
from pathlib import Path

import typer

from sandbox.commands.common import config, console, fail, print_json

REPLAY_FILE = "replay.json"  # sandbox.grading.recorded.REPLAY_FILE, not imported here (lazy imports, above)


def active_replay(cfg) -> dict | None:
    """The replay now serving (its Prometheus URL and the recorded clock), or None."""
    from sandbox.drill.record import read_live_marker

    return read_live_marker(cfg.home / REPLAY_FILE)


def register(app: typer.Typer) -> None:
    @app.command()
    def record(
        incident: str = typer.Argument(..., help="incident id, e.g. ttft-after-deploy"),
        variant: str = typer.Option(None, "--variant", help="the variant (default: chosen by --seed)"),
        seed: int = typer.Option(..., "--seed", help="fixes the variant and the timeline"),
        out: Path = typer.Option(..., "--out", help="the recording to write, e.g. case.tar.gz"),
        duration: float = typer.Option(None, "--duration", min=30, help="seconds of traffic (default: the incident's)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object at the end"),
    ):
        """Run an incident headless and pack it as one file; its key goes beside it (case.key)."""
        from sandbox.commands.drill import _catalogue, _pick, _run
        from sandbox.grading.recording import ARCHIVE_SUFFIXES, pack

        if not out.name.endswith(ARCHIVE_SUFFIXES):
            fail(f"--out must end in .tar.gz or .tgz, got {out.name!r}", code=2)
        if out.exists():
            fail(f"{out} exists; choose another name or remove it", code=2)
        catalogue = _catalogue()
        inc, chosen = _pick(catalogue, incident, False, seed, variant)
        result = _run(inc, chosen, seed, duration, False, as_json, True)
        if result.status != "finished":
            kept = f"run kept in {result.run_dir}" if result.run_dir else "it ended before its run began"
            fail(f"the drill {result.status}; nothing recorded ({kept})")
        cfg = config()
        try:
            key = pack(Path(result.run_dir), cfg.keys_dir / f"{result.run_id}.key", out)
        except (ValueError, OSError) as e:
            fail(str(e))
        if as_json:
            print_json({"recording": str(out), "key": str(key), "run_id": result.run_id, "page": result.page})
        else:
            console.print(f"recorded {out} (key: {key}; keep the key from candidates)")

    @app.command()
    def replay(
        recording: Path = typer.Argument(..., help="a recording made by `sandbox record` (.tar.gz)"),
        port: int = typer.Option(None, "--port", help="Prometheus port (default: the sandbox's, else a free one)"),
        once: bool = typer.Option(False, "--once", help="get ready, print how long it took, and stop (for scripts)"),
        as_json: bool = typer.Option(False, "--json", help="with --once: one JSON object"),
    ):
        """Serve a recording through a real, read-only Prometheus (no Ray, no GPU): the page, and the
        clock at the incident. `sandbox query` answers from it until you stop it with Ctrl-C."""
        from sandbox.commands.drill import page_panel
        from sandbox.drill.record import write_atomic
        from sandbox.grading.recorded import RecordedPrometheus, free_port, stop_left_replay
        from sandbox.grading.recording import unpack
        from services.stack.prometheus import PrometheusError

        t_start = time.monotonic()
        cfg = config()
        if active_replay(cfg):
            fail("a replay is already serving; stop it first (Ctrl-C in its terminal)")
        stop_left_replay(cfg.home)  # a killed replay's Prometheus would hold the port
        dest = cfg.home / "replays" / recording.name.split(".")[0]
        if dest.exists():
            shutil.rmtree(dest)
        try:
            run_dir = unpack(recording, dest)
        except ValueError as e:
            fail(str(e), code=2)
        public = json.loads((run_dir / "run.json").read_text())
        at = public.get("ended") or time.time()
        port = port or free_port(cfg.host, preferred=cfg.prometheus_port)
        try:
            recorded = RecordedPrometheus(run_dir / "prometheus", cfg.host, port)
            with recorded as prom:
                prom.query("up", at=at)  # the first answer: the replay is ready
                ready_s = round(time.monotonic() - t_start, 2)
                # the Prometheus and its scratch copy too: a replay killed before its clean-up leaves them,
                # and `sandbox down` (or the next `up`) stops them from this marker
                info = {"prometheus_url": prom.url, "at": at, "run_dir": str(run_dir), "pid": os.getpid(),
                        "run_id": public.get("run_id"), "prometheus_pid": recorded.proc.pid,
                        "scratch": str(recorded.scratch)}
                if once:
                    out = {**info, "ready_s": ready_s}
                    print_json(out) if as_json else console.print(f"ready in {ready_s} s at {prom.url}")
                    return
                write_atomic(cfg.home / REPLAY_FILE, json.dumps(info))
                try:
                    _show(public, prom.url, at, ready_s, page_panel)
                    while True:
                        time.sleep(1)
                except KeyboardInterrupt:
                    console.print("replay stopped")
                finally:
                    (cfg.home / REPLAY_FILE).unlink(missing_ok=True)
        except PrometheusError as e:
            fail(str(e))


def _show(public: dict, url: str, at: float, ready_s: float, page_panel) -> None:
    from types import SimpleNamespace

    clock = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    console.print(f"replay of run {public.get('run_id')} ready in {ready_s} s; the clock stands at {clock}")
    page = public.get("page") or {"alert": "(no alert fired)", "summary": "", "description": ""}
    state = SimpleNamespace(prometheus_url=f"{url}/graph?g0.end_input={time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(at))}"
                            "&g0.range_input=10m", api_url="(none: a replay has no serving stack)")
    console.print(page_panel(page, state))
    console.print("`sandbox query` answers at the recorded clock; stop the replay with Ctrl-C.")
