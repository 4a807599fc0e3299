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
    s = _letters(rng, 3, 8)
    return Example("sort", f"sort: {s} -> ", "".join(sorted(s)))


def make_add(rng: random.Random) -> Example:
    # Zero-padded two-digit operands and a three-digit sum written least
    # significant digit first: every digit sits at a fixed offset and carries
    # flow in generation order, which a small transformer learns quickly.
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return Example("add", f"add: {a:02d}+{b:02d} -> ", f"{a + b:03d}"[::-1])


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


def long_story_prompt(num_chars: int, seed: int) -> str:
    """A `story` prompt of about num_chars characters (whole sentences, cut at a
    word), for long-context workloads: the grammar is the same at any length."""
    rng = random.Random(f"long-story-{seed}")
    text = "story:"
    while len(text) < num_chars:
        text += " " + _sentence(rng)
    return text[:num_chars].rsplit(" ", 1)[0] + " "


def is_grammatical_story(text: str, complete: bool = True) -> bool:
    """True when `text` is sentences of the grammar.

    complete=True: 2–3 whole sentences, as `story` generates. complete=False:
    at least one whole sentence, and whatever follows the last one is the
    beginning of a grammatical sentence (a continuation cut off by max_tokens).
    """
    *whole, tail = text.split(".")
    if not whole:
        return False
    for i, sentence in enumerate(whole):
        words = sentence.split(" ")
        if i > 0:
            if words[0] != "":
                return False
            words = words[1:]
        if not _parses_sentence(words):
            return False
    if complete:
        return tail == "" and 2 <= len(whole) <= 3
    return tail == "" or (tail.startswith(" ") and _is_sentence_prefix(tail[1:].split(" ")))


def _is_sentence_prefix(words: list[str]) -> bool:
    """Could `words` (the last one possibly cut short) begin a sentence?"""
    return any(_prefix_parses(words, subject_len) for subject_len in (2, 3))


def _prefix_parses(words: list[str], subject_len: int) -> bool:
    cats = [DETERMINERS] + ([ADJECTIVES] if subject_len == 3 else []) + [NOUNS, VERBS, DETERMINERS]
    options = [cats + [ADJECTIVES, NOUNS], cats + [NOUNS]]
    for seq in options:
        if len(words) > len(seq):
            continue
        ok = all(w in seq[i] for i, w in enumerate(words[:-1]))
        if ok and any(v.startswith(words[-1]) for v in seq[len(words) - 1]):
            return True
    return False


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
        return is_grammatical_story(example.prompt[len("story: "):] + completion, complete=False)
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
TRAIN_MIX = {"copy": 0.1, "reverse": 0.12, "sort": 0.3, "add": 0.3, "story": 0.18}


def eval_set(task: str, n: int = 200, seed: int = 1234) -> list[Example]:
    """Held-out examples: a seed the training stream never uses, and training
    skips any example whose prompt lands in an eval set."""
    rng = random.Random(f"eval-{task}-{seed}")
    return [MAKERS[task](rng) for _ in range(n)]
