"""Llama architecture (RMSNorm, RoPE, grouped-query attention, SwiGLU) in the
Hugging Face layout, so `transformers.LlamaForCausalLM` loads our weights.

This module is the training model and the engine's numerical reference: a
dense causal forward over whole sequences. The engine's paged forward lives in
`services/engine/model_runner.py` and reuses these parameters.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    vocab_size: int = 128
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int = 0
    tie_word_embeddings: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be divisible by num_key_value_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_json(cls, path: str | Path) -> "LlamaConfig":
        raw = json.loads(Path(path).read_text())
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})

    def to_hf_dict(self) -> dict:
        d = asdict(self)
        d.update(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                 attention_bias=False, mlp_bias=False, head_dim=self.head_dim,
                 initializer_range=0.02, torch_dtype="float32", use_cache=True)
        return d


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """cos, sin: [T, head_dim] for integer positions [T], as HF computes them (fp32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [..., T, H, D]; cos/sin: [T, D] broadcast over heads (rotate-half layout, as HF).
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = nn.Linear(d, self.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, self.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.num_heads * hd, d, bias=False)

    def forward(self, x, cos, sin):
        # x: [B, T, d]
        b, t, _ = x.shape
        q = apply_rope(self.q_proj(x).view(b, t, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        # [B, H, T, D] for SDPA; GQA by repeating kv heads.
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        rep = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """Module names match Hugging Face's, so state_dict keys are the HF keys."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: [B, T] -> logits [B, T, V]
        t = input_ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(t), self.config.head_dim, self.config.rope_theta)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def save_pretrained(model: LlamaForCausalLM, directory: str | Path) -> None:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().float() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")


def load_pretrained(directory: str | Path) -> LlamaForCausalLM:
    from safetensors.torch import load_file

    directory = Path(directory)
    if not (directory / "config.json").is_file() or not (directory / "model.safetensors").is_file():
        raise ValueError(f"model: {directory} has no config.json and model.safetensors")
    model = LlamaForCausalLM(LlamaConfig.from_json(directory / "config.json"))
    model.load_state_dict(load_file(str(directory / "model.safetensors")))
    return model.eval()
