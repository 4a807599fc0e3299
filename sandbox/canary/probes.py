"""What the canary asks: held-out task prompts (accuracy) and fixed prompts repeated (consistency).

Accuracy probes walk the model's held-out eval sets (`services.model.tasks.eval_set`,
which training never saw), one task after another, at temperature 0, and are
scored with the task's own `check`. Each is put in a length band by its
expected answer, so an error rate that grows with generation length shows as
`long` answers failing more often than `short` ones.

Consistency probes are a fixed set of prompts, each asked in two modes:
`greedy` (temperature 0) and `seeded` (temperature 0.8 with a fixed per-prompt
seed). Either way the same prompt must get the same answer every time, from
any replica, alone or batched with others. Story prompts lead the set: the
story grammar's choices are equally likely, so their greedy decisions are
near-ties that the smallest numeric difference can flip.
"""
from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

from services.model.tasks import TASKS, Example, eval_set

# Answers of up to this many characters (= tokens: the tokenizer is per character) are "short": every
# `add` answer, two thirds of `sort`'s, 40 % of `copy`'s and `reverse`'s; every `story` answer is "long".
SHORT_MAX_CHARS = 6
# Tokens allowed beyond the expected answer, so an answer that runs on is seen (and fails the check).
ANSWER_SLACK_TOKENS = 4
# A story is checked for grammar, not against the reference text, and the model's own sentences may be
# longer than the reference's: it gets room for at least one whole sentence, as the offline eval gives.
STORY_MAX_TOKENS = 64
SEEDED_TEMPERATURE = 0.8
# Consistency prompts: this many from each task's eval set (stories first: they are the sensitive ones).
CONSISTENCY_PROMPTS = {"story": 4, "copy": 1, "reverse": 1, "add": 1}
CONSISTENCY_STORY_TOKENS = 64  # each greedy choice point is a chance to flip: longer shows more
MODES = ("greedy", "seeded")


def length_band(answer: str) -> str:
    return "short" if len(answer) <= SHORT_MAX_CHARS else "long"


def answer_tokens(example: Example) -> int:
    """max_tokens for an accuracy probe."""
    if example.task == "story":
        return STORY_MAX_TOKENS
    return len(example.answer) + ANSWER_SLACK_TOKENS


def task_bands() -> dict[str, tuple[str, ...]]:
    """The length bands each task's eval set falls in (the label values the canary can report)."""
    return {t: tuple(sorted({length_band(e.answer) for e in eval_set(t)})) for t in TASKS}


@dataclass(frozen=True)
class Probe:
    """One completion request with fixed settings (plain /v1/completions: the tasks' own prompt format)."""
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None

    def body(self, model: str) -> dict:
        body = {"model": model, "prompt": self.prompt, "max_tokens": self.max_tokens,
                "temperature": self.temperature}
        if self.seed is not None:
            body["seed"] = self.seed
        return body


@dataclass(frozen=True)
class AccuracyProbe:
    example: Example

    @property
    def task(self) -> str:
        return self.example.task

    @property
    def length(self) -> str:
        return length_band(self.example.answer)

    @property
    def probe(self) -> Probe:
        return Probe(self.example.prompt, answer_tokens(self.example))


@dataclass(frozen=True)
class ConsistencyProbe:
    key: str  # "<task>-<index>/<mode>": one reference answer per key
    mode: str  # "greedy" | "seeded"
    probe: Probe


def accuracy_probes(seed: int = 0) -> Iterator[AccuracyProbe]:
    """Endless: one example of each task in turn; each task's eval set in a seeded order, then again."""
    rng = random.Random(f"canary-accuracy-{seed}")
    orders = {}
    for task in TASKS:
        examples = eval_set(task)
        rng.shuffle(examples)
        orders[task] = examples
    for i in count():
        for task in TASKS:
            examples = orders[task]
            yield AccuracyProbe(examples[i % len(examples)])


def prompt_seed(prompt: str, seed: int) -> int:
    """The fixed sampling seed of a prompt (deterministic across processes, unlike hash())."""
    return zlib.crc32(f"{seed}:{prompt}".encode()) & 0x7FFFFFFF


def consistency_probes(seed: int = 0) -> list[ConsistencyProbe]:
    """Every consistency prompt in every mode, in a fixed order."""
    probes = []
    for task, n in CONSISTENCY_PROMPTS.items():
        for i, example in enumerate(eval_set(task)[:n]):
            tokens = CONSISTENCY_STORY_TOKENS if task == "story" else len(example.answer) + ANSWER_SLACK_TOKENS
            for mode in MODES:
                if mode == "greedy":
                    probe = Probe(example.prompt, tokens)
                else:
                    probe = Probe(example.prompt, tokens, SEEDED_TEMPERATURE, prompt_seed(example.prompt, seed))
                probes.append(ConsistencyProbe(f"{task}-{i}/{mode}", mode, probe))
    return probes
