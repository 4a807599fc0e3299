"""What speculative decoding costs and saves on this machine: CPU seconds per output token, one engine.

    .venv/bin/python bench/speculation.py [--requests 24] [--reps 2] > speculation.json

Side by side, in one process, `--reps` times each in turn (the machine is shared: compare within a rep):
the fleet's setup in tpot-regression (the shipped draft, 3 tokens a step), its `draft` variant (the early
checkpoint, 3 tokens), its `depth` variant (the shipped draft, 16 tokens), no speculation, and the bound on
any draft mismatch: a draft that agrees with the target on nothing (the shipped draft with its token rows
permuted, as a draft trained with another tokenizer's ids would be; built in a temporary directory,
acceptance 0). Requests: the default traffic profile (the incident's), greedy, sent all at once.

A page reads the fleet's median time per output token against 1.5x the top of its healthy bucket, so a
fault must move that median at least 2.25x (sandbox/calibration/baseline_slos.py). The ratio of a setup's
CPU per token to the healthy one's is what the fault itself moves on one engine; the fleet adds queueing
on top, which varies from run to run. One JSON line per setup and rep, then a summary of the ratios.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch
from safetensors.torch import load_file, save_file

from incidents.profiles import PROFILES
from services.engine.llm import LLM
from services.engine.sampling_params import SamplingParams
from services.model.paths import WEIGHTS_DIR


def unrelated_draft(into: Path) -> Path:
    """The shipped draft with its token rows (embedding, LM head) permuted: the same network, other ids."""
    src = WEIGHTS_DIR / "draft"
    shutil.copytree(src, into)
    weights = load_file(str(src / "model.safetensors"))
    vocab = weights["lm_head.weight"].shape[0]
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weights[name] = weights[name][perm].contiguous()
    save_file(weights, str(into / "model.safetensors"))
    return into


def measure(draft: Path | None, k: int, prompts: list[str], params: list[SamplingParams]) -> dict:
    spec = {"speculative_model": str(draft), "num_speculative_tokens": k} if draft else {}
    llm = LLM(str(WEIGHTS_DIR / "target"), torch_threads=1, **spec)
    llm.generate(prompts[:2], params[:2])  # warm-up
    before = dataclasses.replace(llm.llm_engine.stats)
    cpu0 = time.process_time()
    outputs = llm.generate(prompts, params)
    cpu = time.process_time() - cpu0
    after = llm.llm_engine.stats
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    drafted = after.spec_decode_num_draft_tokens_total - before.spec_decode_num_draft_tokens_total
    accepted = after.spec_decode_num_accepted_tokens_total - before.spec_decode_num_accepted_tokens_total
    return {"tokens": tokens, "cpu_ms_per_token": round(1000 * cpu / tokens, 3),
            "acceptance": round(accepted / drafted, 3) if drafted else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if args.requests < 2 or args.reps < 1:
        ap.error("--requests must be >= 2 and --reps >= 1")
    torch.set_num_threads(1)
    rng = random.Random(7)
    sampled = [PROFILES["default"].sample(rng) for _ in range(args.requests)]
    prompts = [r.prompt for r in sampled]
    params = [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, ignore_eos=r.ignore_eos) for r in sampled]
    with tempfile.TemporaryDirectory() as tmp:
        setups = {"healthy (draft, 3)": (WEIGHTS_DIR / "draft", 3),
                  "draft variant (draft-early, 3)": (WEIGHTS_DIR / "draft-early", 3),
                  "depth variant (draft, 16)": (WEIGHTS_DIR / "draft", 16),
                  "unrelated draft (acceptance 0, 3)": (unrelated_draft(Path(tmp) / "draft-unrelated"), 3),
                  "no speculation": (None, 0)}
        ratios: dict[str, list[float]] = {name: [] for name in setups}
        for rep in range(args.reps):
            healthy = None
            for name, (draft, k) in setups.items():
                row = {"rep": rep, "setup": name, **measure(draft, k, prompts, params)}
                healthy = healthy or row["cpu_ms_per_token"]
                ratios[name].append(round(row["cpu_ms_per_token"] / healthy, 2))
                print(json.dumps(row), flush=True)
    print(json.dumps({"summary": "CPU per output token over the healthy setup's, per rep", "ratios": ratios}))


if __name__ == "__main__":
    main()
