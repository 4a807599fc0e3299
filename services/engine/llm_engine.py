"""The engine: schedule, run, sample, update — one `step()` at a time.

    step():
        plan = scheduler.schedule()           # who computes which tokens
        logits = execute(plan)                # flat batch, paged attention over the KV pool
        tokens = sample(plan, logits)         # and drafts verified (speculation)
        finished = update(plan, tokens)       # counters, stop checks, finished blocks freed
        propose(plan)                         # the next drafts (a no-op without speculation)
        outputs = collect(plan)               # RequestOutputs with their deltas (output_processor)
"""
from __future__ import annotations

import itertools
import random
import time

import torch

from kernels.backend import resolve_backend
from services.engine.block_pool import BlockPool
from services.engine.config import EngineConfig
from services.engine.kv_cache_manager import KVCacheManager
from services.engine.memory import DeviceMemory, DeviceOutOfMemoryError
from services.engine.model_runner import ForwardBatch, ModelRunner, SeqSlice
from services.engine.numerics import Numerics
from services.engine.output_processor import OutputProcessor, RequestState
from services.engine.outputs import RequestOutput
from services.engine.sampler import sample
from services.engine.sampling_params import SamplingParams
from services.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from services.engine.sequence import Request
from services.engine.spec_decode import DraftProposer
from services.engine.speculation import NoSpeculation, Speculation
from services.engine.stats import EngineSnapshot, EngineStats
from services.engine.weights import calibrate_kv_scale, load_model_weights
from services.model.tokenizer import CharTokenizer

__all__ = ["LLMEngine", "EngineStats", "DeviceOutOfMemoryError"]


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda requested but no CUDA device is available")
    return torch.device(name)


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.device = _device(config.device)
        self.backend = resolve_backend(config.kernel_backend)
        self.numerics = Numerics.create(config.dtype, self.device)
        self.tokenizer = CharTokenizer.from_pretrained(config.model)
        self.extra_eos_token_ids = config.extra_eos_token_ids(self.tokenizer.eos_token_id)
        self.weights = load_model_weights(config.model, self.numerics, config.quantization,
                                          config.quantization_granularity, config.quantization_group_size)
        cfg = self.weights.config
        if config.max_model_len > cfg.max_position_embeddings:
            raise ValueError(f"max_model_len={config.max_model_len} exceeds the model's "
                             f"max_position_embeddings={cfg.max_position_embeddings}")
        self.kv_scale = 1.0
        if config.kv_cache_dtype == "int8":
            self.kv_scale = config.kv_cache_scale or calibrate_kv_scale(
                config.model, self.tokenizer.encode("story: the cat sees a dog. add: 123+45 -> 861 sort: dcba -> abcd"))
        self.draft_weights = None
        if config.speculative_model:
            self.draft_weights = load_model_weights(config.speculative_model, self.numerics)
            if self.draft_weights.config.vocab_size != cfg.vocab_size:
                raise ValueError("speculative_model must share the target's vocabulary")
        self.memory = DeviceMemory(self.device, config.device_memory_capacity)
        self.stats = EngineStats()
        self._build_runners()
        self.scheduler = Scheduler(
            SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens,
                            config.enable_chunked_prefill, config.num_speculative_tokens),
            KVCacheManager(BlockPool(self.num_blocks, config.enable_prefix_caching),
                           config.block_size, config.enable_prefix_caching),
            abort_mode=config.abort_mode)
        self.outputs = OutputProcessor(self.tokenizer)
        self._states: dict[str, RequestState] = {}
        self._aborted: list[RequestOutput] = []
        self._rng = random.Random(config.seed)
        # sampler_impl="batched": every draw comes from this one generator.
        self._shared_generator = (torch.Generator().manual_seed(config.seed)
                                  if config.sampler_impl == "batched" else None)
        self._ids = itertools.count()

    # -- construction ------------------------------------------------------
    def _build_runners(self) -> None:
        c, cfg = self.config, self.weights.config
        elem = 1 if c.kv_cache_dtype == "int8" else torch.tensor([], dtype=self.numerics.kv_storage_dtype).element_size()
        block_bytes = ModelRunner.kv_bytes_per_block(cfg, c.block_size, elem)
        weights_bytes = self.weights.nbytes()
        if self.draft_weights is not None:
            block_bytes += ModelRunner.kv_bytes_per_block(self.draft_weights.config, c.block_size, elem)
            weights_bytes += self.draft_weights.nbytes()
        common = dict(block_size=c.block_size, numerics=self.numerics, backend=self.backend,
                      batch_invariant=c.batch_invariant, max_model_len=c.max_model_len,
                      attention_impl=c.attention_impl)
        # Profile like vLLM: a dummy step of the full token budget with short
        # sequences. Long contexts at peak batch need more than this: headroom.
        probe = ModelRunner(self.weights, 1, kv_cache_dtype=c.kv_cache_dtype, kv_scale=self.kv_scale, **common)
        num_logits = c.max_num_seqs * (1 + c.num_speculative_tokens)
        profiled = probe.activation_bytes(c.max_num_batched_tokens, num_logits, 1, c.max_num_seqs)
        del probe
        plan = self.memory.plan(weights_bytes, profiled, block_bytes, c.gpu_memory_utilization, c.num_gpu_blocks)
        self.num_blocks = plan.num_blocks
        self.memory_plan = plan
        self.runner = ModelRunner(self.weights, plan.num_blocks, kv_cache_dtype=c.kv_cache_dtype,
                                  kv_scale=self.kv_scale, **common)
        self.spec = NoSpeculation()
        if self.draft_weights is not None:
            draft_runner = ModelRunner(self.draft_weights, plan.num_blocks, kv_cache_dtype=c.kv_cache_dtype,
                                       kv_scale=self.kv_scale, **common)
            self.spec = Speculation(DraftProposer(draft_runner, c.num_speculative_tokens, c.block_size), self.stats)

    # -- requests ----------------------------------------------------------
    def get_tokenizer(self) -> CharTokenizer:
        return self.tokenizer

    def add_request(self, request_id: str | None, prompt: str | list[int], params: SamplingParams | None = None,
                    arrival_time: float | None = None) -> str:
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        request_id = request_id if request_id is not None else f"req-{next(self._ids)}"
        if request_id in self._states:
            raise ValueError(f"request_id {request_id!r} is already in flight")
        if isinstance(prompt, str):
            text, ids = prompt, self.tokenizer.encode(prompt)
        else:
            text, ids = None, list(prompt)
            if not ids or not all(isinstance(t, int) and 0 <= t < self.weights.config.vocab_size for t in ids):
                raise ValueError("prompt token ids must be a non-empty list of ids inside the vocabulary")
        if len(ids) + params.max_tokens > self.config.max_model_len:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                             f"max_model_len={self.config.max_model_len}")
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        # as vLLM: the generation config's extra EOS ids end a request as its EOS does, unless it ignores EOS
        stops = tuple(params.stop_token_ids) + (() if params.ignore_eos else self.extra_eos_token_ids)
        request = Request(request_id, ids, params.max_tokens, self.tokenizer.eos_token_id,
                          ignore_eos=params.ignore_eos, stop_token_ids=stops,
                          sampling_params=params,
                          arrival_time=time.monotonic() if arrival_time is None else arrival_time)
        generator = self._shared_generator
        if generator is None:  # before the scheduler holds the request: a failure here leaves no half-added one
            generator = torch.Generator().manual_seed(seed)
        self.scheduler.add_request(request)
        self._states[request_id] = RequestState(request, text, params, generator)
        self.stats.prompt_tokens_total += len(ids)
        return request_id

    def abort_request(self, request_ids: str | list[str]) -> None:
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        for req in self.scheduler.abort_requests(ids):
            self._aborted.append(self.outputs.output(self._states[req.request_id]))
            self._forget(req.request_id)

    def snapshot(self) -> EngineSnapshot:
        """Counters and gauges now (the process's CPU figures are the server's to add)."""
        sched, st = self.scheduler.stats(), self.stats
        return EngineSnapshot(
            prompt_tokens=st.prompt_tokens_total, generation_tokens=st.generation_tokens_total,
            num_preemptions=sched.num_preemptions_total, prefix_cache_queries=sched.prefix_cache_queries,
            prefix_cache_hits=sched.prefix_cache_hits, spec_drafts=st.spec_decode_num_drafts_total,
            spec_draft_tokens=st.spec_decode_num_draft_tokens_total,
            spec_accepted_tokens=st.spec_decode_num_accepted_tokens_total,
            num_running=sched.num_running, num_waiting=sched.num_waiting, kv_cache_usage=sched.kv_cache_usage,
            memory_used_bytes=self.memory.used_bytes, memory_capacity_bytes=self.memory.capacity_bytes,
            iteration_tokens=list(st.iteration_tokens))

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests() or bool(self._aborted)

    # -- one step ----------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        outputs, self._aborted = self._aborted, []
        plan = self.scheduler.schedule()
        self.spec.drop(plan.preempted_request_ids)
        if not plan.scheduled:
            return outputs
        logits, rows = self._execute(plan)
        sampled, accepted = self._sample(plan, logits, rows)
        finished_ids = self._update(plan, sampled)
        self.scheduler.update_draft_token_ids(
            self.spec.propose(plan.scheduled, accepted, finished_ids, self._states, self.scheduler.kv_cache_manager))
        return outputs + self._collect(plan, sampled, finished_ids)

    def _execute(self, plan: SchedulerOutput) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """One forward pass over the scheduled tokens: logits [N, V] and each request's rows of them."""
        self.runner.copy_blocks(plan.block_copies)
        self.spec.copy_blocks(plan.block_copies)
        batch, rows = self._pack(plan)
        num_seqs, max_blocks = batch.block_tables.shape
        self.memory.reserve_step(self.runner.activation_bytes(
            batch.num_tokens, int(batch.logits_indices.shape[0]), max_blocks, num_seqs))
        try:
            return self.runner.forward(batch), rows
        except torch.OutOfMemoryError as e:  # the real allocator on CUDA
            raise DeviceOutOfMemoryError(str(e)) from e

    def _update(self, plan: SchedulerOutput, sampled: dict[str, list[int]]) -> set[str]:
        """The sampled tokens into the scheduler, the counters, stop strings; the ids that finished."""
        num_before = {s.request.request_id: s.request.num_tokens for s in plan.scheduled}
        finished = self.scheduler.update_from_output(plan, sampled)
        self.memory.release_step()
        self.stats.num_steps_total += 1
        self.stats.last_step_tokens = plan.num_batched_tokens
        self.stats.iteration_tokens.append(plan.num_batched_tokens)
        for rid in sampled:
            self.stats.generation_tokens_total += self._states[rid].request.num_tokens - num_before[rid]
        finished += self.outputs.stopped_by_strings(plan.scheduled, self._states, self.scheduler)
        return {r.request_id for r in finished}

    def _collect(self, plan: SchedulerOutput, sampled: dict, finished_ids: set[str]) -> list[RequestOutput]:
        outputs = [self.outputs.output(self._states[s.request.request_id]) for s in plan.scheduled
                   if s.request.request_id in sampled or s.request.request_id in finished_ids]
        for rid in finished_ids:
            self._forget(rid)
        return outputs

    def _pack(self, plan: SchedulerOutput) -> tuple[ForwardBatch, list[tuple[int, int]]]:
        """Flatten the scheduled tokens; rows[i] = logits rows of scheduled request i."""
        kv = self.scheduler.kv_cache_manager
        seqs, rows, n_logits = [], [], 0
        for s in plan.scheduled:
            req, start, n = s.request, s.num_computed_tokens, s.num_new_tokens
            tokens = (req.all_token_ids + list(s.spec_token_ids))[start:start + n]
            num_logits = len(s.spec_token_ids) + 1 if s.samples else 0
            seqs.append(SeqSlice(tokens, start, kv.get_block_table(req.request_id), num_logits))
            rows.append((n_logits, n_logits + num_logits))
            n_logits += num_logits
        return ForwardBatch.build(seqs, self.config.block_size, self.device), rows

    def _sample(self, plan: SchedulerOutput, logits: torch.Tensor, rows) -> tuple[dict, dict]:
        logits = logits.cpu()
        sampled: dict[str, list[int]] = {}
        accepted: dict[str, int] = {}
        plain = [(i, s) for i, s in enumerate(plan.scheduled) if s.samples and not s.spec_token_ids]
        if plain:
            states = [self._states[s.request.request_id] for _, s in plain]
            toks = sample(logits[[rows[i][0] for i, _ in plain]], [st.params for st in states],
                          [st.generator for st in states], shared=self._shared_generator)
            for (_, s), tok in zip(plain, toks):
                sampled[s.request.request_id] = [tok]
        for i, s in enumerate(plan.scheduled):
            if s.samples and s.spec_token_ids:
                rid, st = s.request.request_id, self._states[s.request.request_id]
                sampled[rid], accepted[rid] = self.spec.verify(rid, list(s.spec_token_ids),
                                                               logits[rows[i][0]:rows[i][1]], st.params, st.generator)
        return sampled, accepted

    def _forget(self, request_id: str) -> None:
        self._states.pop(request_id, None)
        self.spec.forget(request_id)
