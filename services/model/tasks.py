"""Synthetic tasks the model is trained and evaluated on.

Four tasks have exact answers (copy, reverse, sort, add), so quality is
measurable per task; `story` is open-ended text from a seeded probabilistic
grammar whose choices are equally likely, so greedy decoding meets near-ties
the way it does on real language and numeric noise can flip tokens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

LETTERS = "abcdefghijklmnopqrstuvwxyz"

# Grammar: every choice is uniform and, within a slot, words start with
# distinct letters, so the first character of each word is a near-tie.
DETERMINERS = ("the", "a")
ADJECTIVES = ("big", "small", "red", "quiet", "old")
NOUNS = ("cat", "dog", "hen", "fox", "man", "girl")
VERBS = ("sees", "likes", "finds", "helps")


@dataclass(frozen=True)
class Example:
    task: str
    prompt: str
    answer: str  # the exact expected completion (before <eos>)


def _letters(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))


def make_copy(rng: random.Random) -> Example:
    s = _letters(rng, 3, 12)
    return Example("copy", f"copy: {s} -> ", s)


def make_reverse(rng: random.Random) -> Example:
    s = _letters(rng, 3, 12)
    return Example("reverse", f"reverse: {s} -> ", s[::-1])


def make_sort(rng: random.Random) -> Example:
    s = _letters(rng, 3, 10)
    return Example("sort", f"sort: {s} -> ", "".join(sorted(s)))


def make_add(rng: random.Random) -> Example:
    # Two-digit operands; the sum is written least-significant digit first, so
    # carries flow in generation order, which small transformers learn reliably.
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return Example("add", f"add: {a}+{b} -> ", str(a + b)[::-1])


def _noun_phrase(rng: random.Random) -> list[str]:
    words = [rng.choice(DETERMINERS)]
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES))
    words.append(rng.choice(NOUNS))
    return words


def _sentence(rng: random.Random) -> str:
    words = _noun_phrase(rng) + [rng.choice(VERBS)] + _noun_phrase(rng)
    return " ".join(words) + "."


def make_story(rng: random.Random) -> Example:
    text = " ".join(_sentence(rng) for _ in range(rng.randint(2, 3)))
    words = text.split(" ")
    cut = rng.randint(1, 5)
    return Example("story", "story: " + " ".join(words[:cut]) + " ", " ".join(words[cut:]))


def is_grammatical_story(text: str) -> bool:
    """True when `text` is 2–3 sentences of the grammar (what `story` generates)."""
    sentences = [s for s in text.split(".")]
    if sentences[-1] != "" or not 2 <= len(sentences) - 1 <= 3:
        return False
    for i, sentence in enumerate(sentences[:-1]):
        words = sentence.split(" ")
        if i > 0:
            if words[0] != "":
                return False
            words = words[1:]
        if not _parses_sentence(words):
            return False
    return True


def _parses_noun_phrase(words: list[str]) -> int:
    """Number of words the noun phrase at the start of `words` takes, or 0."""
    if len(words) < 2 or words[0] not in DETERMINERS:
        return 0
    if words[1] in NOUNS:
        return 2
    if len(words) >= 3 and words[1] in ADJECTIVES and words[2] in NOUNS:
        return 3
    return 0


def _parses_sentence(words: list[str]) -> bool:
    n = _parses_noun_phrase(words)
    if not n or len(words) <= n or words[n] not in VERBS:
        return False
    m = _parses_noun_phrase(words[n + 1:])
    return bool(m) and n + 1 + m == len(words)


def check(example: Example, completion: str) -> bool:
    """Exact match for the exact tasks; grammaticality for the open-ended one."""
    if example.task == "story":
        return is_grammatical_story(example.prompt[len("story: "):] + completion)
    return completion == example.answer


MAKERS: dict[str, Callable[[random.Random], Example]] = {
    "copy": make_copy,
    "reverse": make_reverse,
    "sort": make_sort,
    "add": make_add,
    "story": make_story,
}
TASKS = tuple(MAKERS)
# Share of each task in the training stream: addition and sorting are hardest.
TRAIN_MIX = {"copy": 0.12, "reverse": 0.14, "sort": 0.26, "add": 0.33, "story": 0.15}


def eval_set(task: str, n: int = 200, seed: int = 1234) -> list[Example]:
    """Held-out examples: a seed the training stream never uses, and training
    skips any example whose prompt lands in an eval set."""
    rng = random.Random(f"eval-{task}-{seed}")
    return [MAKERS[task](rng) for _ in range(n)]
