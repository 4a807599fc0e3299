"""vLLM-v1-style scheduler: one token budget per step, no prefill/decode phases.

Every step hands each request a number of new tokens; a prompt chunk, a whole
prompt, a single decode token and a decode token plus k draft tokens are all
the same thing to the scheduler:

    step budget = 16 tokens, running = [A (decode, 2 drafts), B (prefill)]
    A: 1 + 2  |  B: 9 (chunk of its 20-token prompt) | C (waiting): 4
    [ A A A | B B B B B B B B B | C C C C ]   = 16 tokens

Running requests go first, in order. When the KV pool runs dry the LAST
running request is preempted by recompute (its blocks freed; it re-enters the
front of the waiting queue and later re-prefills prompt + outputs). Waiting
requests are admitted FCFS only in steps that preempted nothing.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from services.engine.kv_cache_manager import KVCacheManager
from services.engine.scheduler_config import ABORT_MODES, SchedulerConfig  # noqa: F401 - re-exported
from services.engine.sequence import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int  # drafts included
    num_computed_tokens: int  # position of the first new token
    spec_token_ids: tuple[int, ...]
    # The step reaches the end of the known tokens: the runner must sample.
    samples: bool


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)  # do before the forward
    preempted_request_ids: list[str] = field(default_factory=list)
    num_batched_tokens: int = 0


@dataclass
class SchedulerStats:
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache_manager: KVCacheManager,
                 clock: Callable[[], float] = time.monotonic, abort_mode: str = "inline") -> None:
        if abort_mode not in ABORT_MODES:
            raise ValueError(f"abort_mode must be one of {', '.join(ABORT_MODES)}, got {abort_mode!r}")
        self.config = config
        self.abort_mode = abort_mode
        self.deferred_release: list[Request] = []  # aborted, blocks not yet released
        self.kv_cache_manager = kv_cache_manager
        self.clock = clock
        self.requests: dict[str, Request] = {}  # unfinished only
        self.waiting: deque[Request] = deque()  # WAITING and PREEMPTED
        self.running: list[Request] = []
        self.num_preemptions_total = 0
        # Tokens are only counted as computed in update_from_output(); a second
        # schedule() before it would hand out the same tokens twice.
        self._awaiting_update = False

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request_id {request.request_id!r} is already scheduled")
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens:
            raise ValueError(f"request {request.request_id!r} must be new (status WAITING)")
        budget = self.config.max_num_batched_tokens
        if not self.config.enable_chunked_prefill and request.num_prompt_tokens > budget:
            raise ValueError(f"prompt of {request.num_prompt_tokens} tokens exceeds max_num_batched_tokens="
                             f"{budget} and enable_chunked_prefill is off")
        # The request's longest possible block table, drafts included, must fit
        # an otherwise empty pool, or it could be preempted forever.
        kv = self.kv_cache_manager
        max_slots = request.num_prompt_tokens + request.max_tokens - 1 + self.config.num_spec_tokens
        if -(-max_slots // kv.block_size) > kv.block_pool.num_blocks:
            raise ValueError(f"prompt + max_tokens of request {request.request_id!r} need more than "
                             f"the {kv.block_pool.num_blocks} KV blocks of the pool")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def update_draft_token_ids(self, draft_token_ids: dict[str, list[int]]) -> None:
        """Attach drafts (at most num_spec_tokens each) to decoding requests."""
        for request_id, drafts in draft_token_ids.items():
            request = self.requests.get(request_id)
            if request is None or request.status is not RequestStatus.RUNNING or request.is_prefill:
                continue  # finished, preempted or still prefilling: drafts are moot
            request.spec_token_ids = list(drafts[: self.config.num_spec_tokens])

    def schedule(self) -> SchedulerOutput:
        if self._awaiting_update:
            raise RuntimeError("schedule() called again before update_from_output()")
        self.kv_cache_manager.begin_step()
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        kv = self.kv_cache_manager
        # Slots past the step for the draft model, which writes KV for its own
        # proposals at positions num_tokens.. once this step is done (as vLLM
        # reserves for EAGLE). Zero without speculative decoding.
        lookahead = self.config.num_spec_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = request.num_tokens - request.num_computed_tokens
            assert num_new >= 1, f"running request {request.request_id} has nothing to compute"
            if request.is_prefill:
                request.spec_token_ids.clear()  # drafts only follow a sampled token
            else:
                # Drafts that do not fit the budget are dropped, not deferred.
                del request.spec_token_ids[min(budget - 1, self.config.num_spec_tokens):]
                num_new += len(request.spec_token_ids)
            num_new = min(num_new, budget)  # a prefill chunk, or the whole step
            while True:
                copies = kv.allocate_slots(request, num_new, num_lookahead_tokens=lookahead)
                if copies is not None:
                    break
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted_request_ids.append(victim.request_id)
                if victim is request:
                    break
            if copies is None:
                break
            self._emit(out, request, num_new, copies)
            budget -= num_new
            index += 1

        while (not out.preempted_request_ids and self.waiting and budget > 0
               and len(self.running) < self.config.max_num_seqs):
            request = self.waiting[0]
            computed_blocks, num_hit = kv.get_computed_blocks(request)
            num_new = request.num_tokens - num_hit
            if num_new > budget:
                # Without chunked prefill a prompt waits for a step it fits in;
                # only a resumed request longer than any step is chunked anyway.
                if not self.config.enable_chunked_prefill and num_new <= self.config.max_num_batched_tokens:
                    break
                num_new = budget
            copies = kv.allocate_slots(request, num_new, computed_blocks, lookahead, num_new_computed_tokens=num_hit)
            if copies is None:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_hit
            if request.first_scheduled_time is None:
                request.first_scheduled_time = self.clock()
            if request.num_cached_tokens is None:
                request.num_cached_tokens = num_hit
            self._emit(out, request, num_new, copies)
            budget -= num_new

        assert out.num_batched_tokens == self.config.max_num_batched_tokens - budget
        self._awaiting_update = bool(out.scheduled)
        return out

    def _emit(self, out: SchedulerOutput, request: Request, num_new: int, copies: list[tuple[int, int]]) -> None:
        spec = tuple(request.spec_token_ids)
        samples = request.num_computed_tokens + num_new == request.num_tokens + len(spec)
        out.scheduled.append(ScheduledRequest(request, num_new, request.num_computed_tokens, spec, samples))
        out.block_copies.extend(copies)
        out.num_batched_tokens += num_new

    def _preempt(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids.clear()
        request.num_preemptions += 1
        self.num_preemptions_total += 1
        self.waiting.appendleft(request)

    def update_from_output(self, scheduler_output: SchedulerOutput,
                           sampled_token_ids: dict[str, list[int]]) -> list[Request]:
        """Advance scheduled requests by the step's results; return those that finished.

        For a sampling request the list is its accepted drafts plus one new
        token; the rejected drafts' KV slots are rolled back.
        """
        self._awaiting_update = False
        finished = []
        for item in scheduler_output.scheduled:
            request = item.request
            if request.status is not RequestStatus.RUNNING:
                continue  # aborted or finished by the engine since schedule()
            request.num_computed_tokens += item.num_new_tokens
            if not item.samples:
                continue  # a prefill chunk: any sampled token is meaningless
            tokens = sampled_token_ids.get(request.request_id)
            num_spec = len(item.spec_token_ids)
            if not tokens or len(tokens) > num_spec + 1:
                raise ValueError(f"request {request.request_id!r} needs 1..{num_spec + 1} sampled tokens, "
                                 f"got {tokens!r}")
            num_accepted = len(tokens) - 1
            if tuple(tokens[:num_accepted]) != item.spec_token_ids[:num_accepted]:
                raise ValueError(f"accepted tokens of {request.request_id!r} differ from its drafts")
            request.num_computed_tokens -= num_spec - num_accepted
            request.spec_token_ids.clear()
            status = self._append_tokens(request, tokens)
            if status is not None:
                self._finish(request, status)
                finished.append(request)
        return finished

    def _append_tokens(self, request: Request, tokens: list[int]) -> RequestStatus | None:
        """Append until the first stop condition; later tokens are dropped."""
        now = self.clock()
        if request.first_token_time is None:
            request.first_token_time = now
        request.last_token_time = now
        for token in tokens:
            request.output_token_ids.append(token)
            if (token == request.eos_token_id and not request.ignore_eos) or token in request.stop_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if request.num_output_tokens >= request.max_tokens:
                return RequestStatus.FINISHED_LENGTH
        return None

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus,
                        release: bool = True) -> list[Request]:
        """Stop unfinished requests (e.g. a stop string was detokenized); unknown ids are skipped.

        Between schedule() and the forward pass, the forward must still run the
        whole SchedulerOutput: later requests of the batch may read KV blocks
        that a stopped request caches and writes in that very step.
        """
        if not RequestStatus.is_finished(status):
            raise ValueError(f"status must be a FINISHED_* status, got {status}")
        finished = []
        for request_id in request_ids:
            request = self.requests.get(request_id)
            if request is not None:
                self._finish(request, status, release)
                finished.append(request)
        return finished

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        # "deferred" parks aborted requests for a release after the step in flight
        # that never comes: the sandbox's KV-block-leak fault (ref_cnt never drops).
        inline = self.abort_mode == "inline"
        aborted = self.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED, release=inline)
        if not inline:
            self.deferred_release.extend(aborted)
        return aborted

    def _finish(self, request: Request, status: RequestStatus, release: bool = True) -> None:
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.status = status
        request.finished_time = self.clock()
        if release:
            self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def stats(self) -> SchedulerStats:
        kv = self.kv_cache_manager
        return SchedulerStats(self.num_running, self.num_waiting, kv.usage, self.num_preemptions_total,
                              kv.prefix_cache_queries, kv.prefix_cache_hits)
