"""Engine configuration: one validated dataclass, names as in vLLM."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.engine.scheduler import ABORT_MODES

DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("none", "int8", "int4")
# per-module: one int scale shared by all weights of a layer's attention, and
# one by all weights of its MLP (coarser than per-tensor).
GRANULARITIES = ("per-channel", "per-group", "per-tensor", "per-module")
KV_CACHE_DTYPES = ("auto", "int8")
KERNEL_BACKENDS = ("torch", "triton")
DEVICES = ("auto", "cpu", "cuda")
ATTENTION_IMPLS = ("auto", "paged")
SAMPLER_IMPLS = ("default", "batched")
GENERATION_CONFIG_FILE = "generation_config.json"


def _positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


@dataclass
class EngineConfig:
    model: str
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks: int | None = None  # overrides the memory-derived KV pool size
    # On CPU there is no device allocator to ask, so capacity is configured.
    device_memory_capacity: int = 256 * 2**20
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int = 1024
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speculative_model: str | None = None
    num_speculative_tokens: int = 0
    kernel_backend: str | None = None  # None: triton on CUDA, torch on CPU
    batch_invariant: bool = False
    # auto: the fastest kernel for the backend (fused SDPA on CPU, Triton on a
    # GPU); paged: the blockwise paged-attention torch reference, everywhere.
    attention_impl: str = "auto"
    # How abort_request releases a request's KV blocks (see Scheduler).
    abort_mode: str = "inline"
    # default: each request draws from its own generator, seeded by
    # SamplingParams.seed; batched: one engine-wide generator for all draws.
    sampler_impl: str = "default"
    dtype: str = "auto"  # auto: bfloat16 (emulated on CPU by rounding), as served in production
    quantization: str = "none"
    quantization_granularity: str = "per-channel"
    quantization_group_size: int = 16  # must divide hidden_size and intermediate_size (256, 688)
    kv_cache_dtype: str = "auto"
    kv_cache_scale: float | None = None  # int8 KV: value = q * scale; None = calibrate at load
    device: str = "auto"
    seed: int = 0
    torch_threads: int | None = None
    # A directory with a generation_config.json (vLLM's --generation-config); None: the model's own, if it has
    # one. Its `eos_token_id` ids beyond the tokenizer's EOS also end a request that does not ignore EOS.
    generation_config: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.model, (str, Path)) or not str(self.model):
            raise ValueError("model must be a path to a model directory")
        self.model = str(self.model)
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                     "device_memory_capacity", "quantization_group_size"):
            _positive(name, getattr(self, name))
        if self.num_gpu_blocks is not None:
            _positive("num_gpu_blocks", self.num_gpu_blocks)
        if not isinstance(self.gpu_memory_utilization, (int, float)) or not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        for name in ("enable_prefix_caching", "enable_chunked_prefill", "batch_invariant"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        _choice("dtype", self.dtype, DTYPES)
        _choice("quantization", self.quantization, QUANTIZATIONS)
        _choice("quantization_granularity", self.quantization_granularity, GRANULARITIES)
        _choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        _choice("device", self.device, DEVICES)
        _choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        _choice("abort_mode", self.abort_mode, ABORT_MODES)
        _choice("sampler_impl", self.sampler_impl, SAMPLER_IMPLS)
        if self.kernel_backend is not None:
            _choice("kernel_backend", self.kernel_backend, KERNEL_BACKENDS)
        if self.kv_cache_scale is not None and not (isinstance(self.kv_cache_scale, (int, float)) and self.kv_cache_scale > 0):
            raise ValueError(f"kv_cache_scale must be a positive number, got {self.kv_cache_scale!r}")
        if not isinstance(self.num_speculative_tokens, int) or self.num_speculative_tokens < 0:
            raise ValueError(f"num_speculative_tokens must be a non-negative integer, got {self.num_speculative_tokens!r}")
        if self.num_speculative_tokens and not self.speculative_model:
            raise ValueError("num_speculative_tokens needs speculative_model (a draft model path)")
        if self.speculative_model and not self.num_speculative_tokens:
            raise ValueError("speculative_model needs num_speculative_tokens >= 1")
        if self.torch_threads is not None:
            _positive("torch_threads", self.torch_threads)
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError("max_num_batched_tokens must be >= max_model_len when enable_chunked_prefill is off")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs (each running sequence needs a token)")
        if self.generation_config is not None:
            self.generation_config = str(self.generation_config)
            if not (Path(self.generation_config) / GENERATION_CONFIG_FILE).is_file():
                raise ValueError(f"generation_config: {self.generation_config} has no {GENERATION_CONFIG_FILE}")
        for path_field in ("model", "speculative_model"):
            value = getattr(self, path_field)
            if value is not None and not (Path(value) / "config.json").is_file():
                raise ValueError(f"{path_field}: {value} is not a model directory (no config.json)")

    def to_dict(self) -> dict:
        return asdict(self)

    def extra_eos_token_ids(self, eos_token_id: int) -> tuple[int, ...]:
        """The generation config's `eos_token_id` ids other than the tokenizer's `eos_token_id`, as vLLM's
        SamplingParams.update_from_generation_config adds them to every request's stop tokens."""
        path = Path(self.generation_config or self.model) / GENERATION_CONFIG_FILE
        if not path.is_file():
            return ()
        try:
            ids = json.loads(path.read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError) as e:
            raise ValueError(f"{path}: not a generation config ({e})") from None
        ids = [ids] if isinstance(ids, int) else ids if ids is not None else []
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise ValueError(f"{path}: eos_token_id must be a token id or a list of them, got {ids!r}")
        return tuple(sorted(set(ids) - {eos_token_id}))
