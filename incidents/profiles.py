"""Traffic profiles: what requests look like (tasks, prompt lengths, shared prefix, output lengths).

A profile is data; `sample(rng)` turns it into one request. Prompts are the
model's own tasks (so outputs stay meaningful), optionally preceded by a shared
system prompt (the prefix-cache workload) and by unrelated context text (the
prompt-length mix). Chat and completion requests build the same prompt string
(see `ChatCompletionRequest.engine_prompt`), so both share cached prefixes.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.model.tasks import MAKERS


def _worked_examples(n: int, seed: int = 1234) -> str:
    rng = random.Random(seed)
    return "".join(f"{ex.prompt}{ex.answer}\n" for ex in (MAKERS[t](rng) for t in sorted(MAKERS) * n))


# As in production, the shared system prompt is long (instructions plus worked examples, about 500
# characters = tokens): prefix caching saves most of every request's prefill, which is what makes it matter.
SYSTEM_PROMPT = ("system: you are a careful assistant for exact text tasks. copy, reverse, sort and add "
                 "exactly; tell short stories in plain words. examples:\n" + _worked_examples(2))


@dataclass(frozen=True)
class LengthBand:
    weight: float
    min_chars: int
    max_chars: int


@dataclass(frozen=True)
class TrafficProfile:
    name: str
    description: str
    task_mix: dict[str, float]
    shared_prefix_share: float  # share of requests that start with SYSTEM_PROMPT
    context: tuple[LengthBand, ...]  # prompt-length mix: characters of context before the task
    output_tokens: tuple[int, int]  # max_tokens drawn uniformly from this range
    ignore_eos: bool = True  # generate exactly max_tokens, so the output-length mix is the profile's
    chat_share: float = 0.5
    stream: bool = True
    temperature: float = 0.0
    # A client that reads the first few streamed text chunks (a label, a yes/no) and closes the stream,
    # leaving the server to abort the rest: a stream of aborts that healthy servers handle without a trace.
    close_after_chunks: int | None = None
    # How many distinct context texts there are (a job asking many questions about a few documents,
    # which prefix caching serves from cache); 0: fresh context for every request.
    documents: int = 0

    def __post_init__(self):
        if not self.task_mix or any(t not in MAKERS for t in self.task_mix):
            raise ValueError(f"task_mix must name tasks among {', '.join(MAKERS)}, got {self.task_mix!r}")
        if any(w < 0 for w in self.task_mix.values()) or sum(self.task_mix.values()) <= 0:
            raise ValueError("task_mix weights must be >= 0 and not all zero")
        for name in ("shared_prefix_share", "chat_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if not self.context or any(b.weight < 0 or not 0 <= b.min_chars <= b.max_chars for b in self.context):
            raise ValueError("context must be length bands with weight >= 0 and 0 <= min_chars <= max_chars")
        lo, hi = self.output_tokens
        if not 1 <= lo <= hi:
            raise ValueError(f"output_tokens must be (lo, hi) with 1 <= lo <= hi, got {self.output_tokens!r}")
        if self.documents < 0:
            raise ValueError(f"documents must be >= 0, got {self.documents!r}")
        if self.close_after_chunks is not None and self.close_after_chunks < 1:
            raise ValueError(f"close_after_chunks must be >= 1, got {self.close_after_chunks!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")

    def sample(self, rng: random.Random) -> SampledRequest:
        task = rng.choices(list(self.task_mix), weights=list(self.task_mix.values()))[0]
        example = MAKERS[task](rng)
        band = rng.choices(self.context, weights=[b.weight for b in self.context])[0]
        if self.documents:  # one of a few fixed documents, the same text every time it is drawn
            doc = rng.randrange(self.documents)
            context = _filler(random.Random(f"document/{self.name}/{doc}"), band.max_chars)
        else:
            context = _filler(rng, rng.randint(band.min_chars, band.max_chars))
        shared = rng.random() < self.shared_prefix_share
        user = context + example.prompt
        chat = rng.random() < self.chat_share
        return SampledRequest(task=task, chat=chat, system=SYSTEM_PROMPT if shared else None, user=user,
                              max_tokens=rng.randint(*self.output_tokens), ignore_eos=self.ignore_eos,
                              stream=self.stream, temperature=self.temperature,
                              close_after_chunks=self.close_after_chunks if self.stream else None)


@dataclass
class SampledRequest:
    task: str
    chat: bool
    system: str | None
    user: str
    max_tokens: int
    ignore_eos: bool
    stream: bool
    temperature: float
    seed: int | None = None
    extra: dict = field(default_factory=dict)
    close_after_chunks: int | None = None  # stop reading (close the stream) after this many text chunks

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    @property
    def prompt(self) -> str:
        """The engine prompt this request becomes (the chat template's output for chat)."""
        return (self.system + "\n" if self.system else "") + self.user

    def body(self, model: str) -> dict:
        body = {"model": model, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "stream": self.stream, "ignore_eos": self.ignore_eos, **self.extra}
        if self.seed is not None:
            body["seed"] = self.seed
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.chat:
            messages = [{"role": "system", "content": self.system}] if self.system else []
            body["messages"] = messages + [{"role": "user", "content": self.user}]
        else:
            body["prompt"] = self.prompt
        return body


def _filler(rng: random.Random, n_chars: int) -> str:
    """Unrelated context of about n_chars characters: worked examples of the tasks, one per line."""
    if n_chars <= 0:
        return ""
    parts, total = [], 0
    while total < n_chars:
        ex = MAKERS[rng.choice(list(MAKERS))](rng)
        line = ex.prompt + ex.answer + "\n"
        parts.append(line)
        total += len(line)
    return "".join(parts)[:n_chars]


_EVEN = {t: 1.0 for t in MAKERS}
PROFILES: dict[str, TrafficProfile] = {p.name: p for p in (
    TrafficProfile("default", "mixed tasks, half with the shared system prompt, mostly short prompts",
                   _EVEN, 0.5, (LengthBand(0.7, 0, 0), LengthBand(0.25, 32, 160), LengthBand(0.05, 200, 400)),
                   (16, 48)),
    TrafficProfile("long-tail", "mixed tasks, half with the shared system prompt; one request in five brings "
                   "a long context", _EVEN, 0.5,
                   (LengthBand(0.5, 0, 0), LengthBand(0.3, 32, 160), LengthBand(0.2, 200, 400)), (16, 48)),
    TrafficProfile("shared-prefix", "nearly every request starts with the system prompt",
                   _EVEN, 0.95, (LengthBand(1.0, 0, 0),), (16, 48)),
    TrafficProfile("long-prompts", "long unrelated context before each task; little prefix sharing",
                   _EVEN, 0.1, (LengthBand(1.0, 250, 450),), (16, 48)),
    # The context is sized so the grown mix costs more than the base mix's share the drill offers: on a
    # 2-core CPU 120-260 characters cost 0.53 of the base ceiling, right at the 0.55 offered (no queue in
    # most runs); a cost of a + b x uncached tokens fitted to those two ceilings put 200-400 at about 0.42
    # (an overload of 1.3), and side by side they measured 0.47 (1.18; bench/results/session-2026-12-07.md).
    # The longest request stays under max_model_len: 468 (system) + 400 + 32 (task) + 1 + 48 output = 949
    # of 1024 positions.
    TrafficProfile("shared-prefix-long", "the system prompt, then long context before each task",
                   _EVEN, 0.95, (LengthBand(1.0, 200, 400),), (16, 48)),
    TrafficProfile("documents", "a batch job: questions about one of 32 long documents (after the system "
                   "prompt); the client reads the first 3 text chunks and closes the stream",
                   {"copy": 1.0, "reverse": 1.0, "sort": 1.0, "add": 1.0}, 1.0, (LengthBand(1.0, 420, 420),),
                   (24, 48), chat_share=0.0, close_after_chunks=3, documents=32),
    TrafficProfile("short", "short prompts and outputs: quick checks and tests",
                   _EVEN, 0.5, (LengthBand(1.0, 0, 0),), (4, 12)),
)}


def get_profile(name: str) -> TrafficProfile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
    return PROFILES[name]
