"""Train the target or draft model on the synthetic task mix, reproducibly.

    python -m services.model.train --model target --out services/model/weights/target

Seeded data stream, seeded init, fixed step count: the same command gives the
same weights (up to the CPU's floating-point library).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from services.model.llama import LlamaConfig, LlamaForCausalLM, save_pretrained
from services.model.reference import greedy_generate
from services.model.tasks import MAKERS, TASKS, TRAIN_MIX, check, eval_set
from services.model.tokenizer import CharTokenizer, build_tokenizer, save_tokenizer

SIZES = {
    "target": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=2),
    "draft": dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2),
}
# The settings the shipped weights were trained with (`make train` repeats them).
DEFAULTS = {
    "target": dict(steps=2000, seq_len=128, batch_size=24, lr=3e-3, eval_every=600, threads=2),
    "draft": dict(steps=2000, seq_len=128, batch_size=24, lr=3e-3, eval_every=0, threads=2),
}


class PackedStream:
    """Examples packed back to back into fixed-length rows, as in pretraining.

    Earlier examples in a row act as unrelated context, so the model learns to
    answer after a preamble (a system prompt) and at positions past its own.
    Loss covers answers only; random task inputs are unpredictable by design.
    """

    def __init__(self, tok: CharTokenizer, seq_len: int, seed: int, mix: dict[str, float] | None = None):
        self.tok, self.seq_len = tok, seq_len
        self.rng = random.Random(seed)
        self.held_out = {e.prompt for t in TASKS for e in eval_set(t)}
        self.tasks, self.weights = zip(*(mix or TRAIN_MIX).items())

    def _example(self) -> tuple[list[int], list[int]]:
        while True:
            ex = MAKERS[self.rng.choices(self.tasks, self.weights)[0]](self.rng)
            if ex.prompt not in self.held_out:
                break
        prompt = self.tok.encode(ex.prompt)
        answer = self.tok.encode(ex.answer, add_special_tokens=False) + [self.tok.eos_token_id]
        if ex.task == "story":  # grammar text is predictable from its first word on
            mask = [0] * len(self.tok.encode("story: ")) + [1] * (len(prompt) - len(self.tok.encode("story: ")))
        else:
            mask = [0] * len(prompt)
        return prompt + answer, mask + [1] * len(answer)

    def row(self) -> tuple[list[int], list[int]]:
        ids: list[int] = []
        mask: list[int] = []
        while len(ids) < self.seq_len + 1:
            e_ids, e_mask = self._example()
            ids += e_ids
            mask += e_mask
        return ids[: self.seq_len + 1], mask[: self.seq_len + 1]

    def batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.row() for _ in range(batch_size)]
        ids = torch.tensor([r[0] for r in rows])
        mask = torch.tensor([r[1] for r in rows], dtype=torch.float32)
        return ids, mask


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def quick_eval(model: LlamaForCausalLM, tok: CharTokenizer, n: int) -> dict[str, float]:
    model.eval()
    scores = {}
    for task in TASKS:
        examples = eval_set(task)[:n]
        ok = 0
        for ex in examples:
            out = greedy_generate(model, tok.encode(ex.prompt), 64, tok.eos_token_id)
            ok += check(ex, tok.decode(out))
        scores[task] = ok / len(examples)
    model.train()
    return scores


def train(which: str, out: Path, steps: int, seed: int, batch_size: int, seq_len: int,
          lr: float, eval_every: int, threads: int, init: Path | None = None,
          mix: dict[str, float] | None = None) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tok = CharTokenizer(build_tokenizer())
    cfg = LlamaConfig(**SIZES[which])
    model = LlamaForCausalLM(cfg)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02 if "down_proj" not in name and "o_proj" not in name
                                  else 0.02 / math.sqrt(2 * cfg.num_hidden_layers))
    if init is not None:  # a second stage continues from the first stage's weights
        from safetensors.torch import load_file
        model.load_state_dict(load_file(str(Path(init) / "model.safetensors")))
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    stream = PackedStream(tok, seq_len, seed, mix)
    log = {"model": which, "params": n_params, "steps": steps, "seed": seed, "evals": []}
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=min(200, steps // 10))
        ids, mask = stream.batch(batch_size)
        logits = model(ids[:, :-1])
        loss_tok = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1),
                                   reduction="none")
        loss = (loss_tok * mask[:, 1:].reshape(-1)).sum() / mask[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(json.dumps({"step": step, "loss": round(loss.item(), 4),
                              "elapsed_s": round(time.time() - t0, 1)}), flush=True)
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < steps:
            scores = quick_eval(model, tok, 20)
            log["evals"].append({"step": step + 1, **scores})
            print(json.dumps({"step": step + 1, "eval": scores}), flush=True)
            save_pretrained(model, out)
    model.eval()
    save_pretrained(model, out)
    save_tokenizer(out)
    log["train_seconds"] = round(time.time() - t0, 1)
    log["final_eval"] = quick_eval(model, tok, 50)
    (out / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    return log


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(SIZES), required=True)
    p.add_argument("--out", type=Path, required=True, help="directory for config.json, model.safetensors, tokenizer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", type=Path, help="start from these weights instead of a seeded init")
    p.add_argument("--mix", help="task shares, e.g. add=0.5,sort=0.3,copy=0.1,reverse=0.05,story=0.05")
    for name in ("steps", "batch_size", "seq_len", "eval_every", "threads"):
        p.add_argument("--" + name.replace("_", "-"), type=int, help="default: the shipped model's setting")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the shipped model's setting)")
    a = p.parse_args(argv)
    mix = None
    if a.mix:
        try:
            mix = {k: float(v) for k, v in (item.split("=") for item in a.mix.split(","))}
        except ValueError:
            p.error("--mix wants task=share pairs separated by commas")
        if set(mix) - set(TASKS) or min(mix.values()) < 0 or sum(mix.values()) <= 0:
            p.error(f"--mix: tasks must be among {', '.join(TASKS)} with non-negative shares")
    s = {k: (getattr(a, k) if getattr(a, k) is not None else v) for k, v in DEFAULTS[a.model].items()}
    if s["steps"] < 1 or s["batch_size"] < 1 or s["seq_len"] < 8 or s["threads"] < 1:
        p.error("--steps, --batch-size and --threads must be positive and --seq-len at least 8")
    log = train(a.model, a.out, s["steps"], a.seed, s["batch_size"], s["seq_len"], s["lr"],
                s["eval_every"], s["threads"], a.init, mix)
    print(json.dumps({"final_eval": log["final_eval"], "train_seconds": log["train_seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
