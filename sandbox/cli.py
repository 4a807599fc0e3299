"""`sandbox` command line (typer + rich)."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import json
import time

import typer
from rich.console import Console
from rich.table import Table

from sandbox.commands import register as register_stack_commands
from sandbox.commands.grafana import register as register_grafana_commands
from sandbox.drill.interrupts import end_on_signals

app = typer.Typer(help="Inference incident sandbox: practise debugging LLM serving.", no_args_is_help=True,
                  add_completion=False)
console = Console()


@app.callback()
def _every_command() -> None:
    # SIGTERM and SIGHUP (a terminal closed, an SSH session dropped) end any command as Ctrl-C does,
    # so what it started is stopped: by default they kill the process where it stands.
    end_on_signals()


@app.command()
def demo(
    requests: int = typer.Option(24, "--requests", "-n", min=1, help="how many prompts to send"),
    max_tokens: int = typer.Option(32, min=1, help="tokens to generate per prompt"),
    speculative: bool = typer.Option(False, help="speculative decoding with the shipped draft model"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
):
    """Generate with the engine on the shipped model: continuous batching over mixed tasks."""
    from services.engine import LLM, SamplingParams
    from services.model.paths import draft_path, target_path
    from services.model.tasks import TASKS, check, eval_set

    examples = [e for i in range(requests) for e in [eval_set(TASKS[i % len(TASKS)])[i // len(TASKS)]]]
    extra = dict(speculative_model=str(draft_path()), num_speculative_tokens=3) if speculative else {}
    with console.status("loading the model", spinner="dots"):
        llm = LLM(str(target_path()), torch_threads=2, **extra)
    t0 = time.perf_counter()
    with console.status(f"generating {requests} completions", spinner="dots"):
        outs = llm.generate([e.prompt for e in examples], SamplingParams(temperature=0, max_tokens=max_tokens))
    elapsed = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    rows = [{"task": e.task, "prompt": e.prompt, "output": o.outputs[0].text, "correct": check(e, o.outputs[0].text)}
            for e, o in zip(examples, outs)]
    stats = llm.llm_engine.stats
    summary = {"requests": requests, "generated_tokens": tokens, "seconds": round(elapsed, 3),
               "tokens_per_s": round(tokens / elapsed, 1), "steps": stats.num_steps_total,
               "correct": sum(r["correct"] for r in rows)}
    if speculative:
        summary["spec_acceptance"] = round(stats.spec_decode_num_accepted_tokens_total
                                           / max(1, stats.spec_decode_num_draft_tokens_total), 3)
    if as_json:
        print(json.dumps({"summary": summary, "outputs": rows}))
        return
    table = Table("task", "prompt", "output", "ok")
    for r in rows:
        table.add_row(r["task"], r["prompt"], r["output"], "✓" if r["correct"] else "✗")
    console.print(table)
    console.print(summary)


@app.command("eval")
def evaluate(
    n: int = typer.Option(200, "-n", min=1, help="held-out examples per task"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Per-task exact-match accuracy of the shipped model and the draft's agreement with it."""
    from services.model import evaluate as ev

    argv = ["-n", str(n)] + (["--json"] if as_json else [])
    raise typer.Exit(ev.main(argv))


register_stack_commands(app)  # up, down, status, run, traffic, query, deploy
register_grafana_commands(app)  # grafana push, grafana annotate

if __name__ == "__main__":
    app()
