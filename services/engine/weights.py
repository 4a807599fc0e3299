"""Load Hugging Face Llama weights into the engine's layout.

Projections sharing an input are fused (q|k|v, gate|up) so one matmul serves
each; fusion concatenates output rows and leaves every dot product unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from kernels.quantized_weight import QuantizedWeight, quantize_weight
from services.engine.numerics import Numerics
from services.model.llama import LlamaConfig, load_pretrained

Linear = torch.Tensor | QuantizedWeight


@dataclass
class LayerWeights:
    input_norm: torch.Tensor   # [d]
    qkv: Linear                # [(Hq + 2 Hkv) * D, d]
    o: Linear                  # [d, Hq * D]
    post_norm: torch.Tensor    # [d]
    gate_up: Linear            # [2 I, d]
    down: Linear               # [d, I]


@dataclass
class ModelWeights:
    config: LlamaConfig
    embed: torch.Tensor        # [V, d]
    layers: list[LayerWeights]
    norm: torch.Tensor         # [d]
    lm_head: torch.Tensor      # [V, d]

    def nbytes(self) -> int:
        def size(w) -> int:
            if isinstance(w, QuantizedWeight):
                return w.qweight.numel() * w.qweight.element_size() + w.scales.numel() * w.scales.element_size()
            return w.numel() * w.element_size()
        total = size(self.embed) + size(self.norm) + size(self.lm_head)
        for layer in self.layers:
            total += sum(size(getattr(layer, f)) for f in LayerWeights.__dataclass_fields__)
        return total


def load_model_weights(path: str | Path, numerics: Numerics, quantization: str = "none",
                       granularity: str = "per-channel", group_size: int = 32) -> ModelWeights:
    path = Path(path)
    cfg = LlamaConfig.from_json(path / "config.json")
    sd = load_file(str(path / "model.safetensors"))

    def w(name: str) -> torch.Tensor:
        if name not in sd:
            raise ValueError(f"model: {path} lacks weight {name}")
        return sd[name].float()

    def module(*ts: torch.Tensor) -> list[Linear]:
        """The linear weights of one module (a layer's attention, or its MLP)."""
        if quantization == "none":
            return [numerics.weight(t) for t in ts]
        bits = 8 if quantization == "int8" else 4
        if granularity == "per-group" and any(t.shape[1] % group_size for t in ts):
            raise ValueError(f"quantization_group_size={group_size} must divide every input width "
                             f"of the model (hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size})")
        if granularity == "per-module":  # stored per-tensor, with the module's shared scale
            amax = max(float(t.abs().max()) for t in ts)
            return [quantize_weight(t.to(numerics.device), bits, "per-tensor", amax=amax) for t in ts]
        return [quantize_weight(t.to(numerics.device), bits, granularity, group_size) for t in ts]

    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        qkv = torch.cat([w(p + "self_attn.q_proj.weight"), w(p + "self_attn.k_proj.weight"),
                         w(p + "self_attn.v_proj.weight")])
        gate_up = torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")])
        qkv, o = module(qkv, w(p + "self_attn.o_proj.weight"))
        gate_up, down = module(gate_up, w(p + "mlp.down_proj.weight"))
        layers.append(LayerWeights(
            input_norm=numerics.weight(w(p + "input_layernorm.weight")), qkv=qkv, o=o,
            post_norm=numerics.weight(w(p + "post_attention_layernorm.weight")), gate_up=gate_up, down=down,
        ))
    lm_head = w("model.embed_tokens.weight") if cfg.tie_word_embeddings else w("lm_head.weight")
    return ModelWeights(cfg, numerics.weight(w("model.embed_tokens.weight")), layers,
                        numerics.weight(w("model.norm.weight")), numerics.weight(lm_head))


@torch.no_grad()
def calibrate_kv_scale(path: str | Path, sample_ids: list[int]) -> float:
    """Per-tensor int8 KV-cache scale: absmax of K (after RoPE) and V on sample text / 127.

    RoPE rotates (k_i, k_{i+D/2}) pairs, so |k'| is bounded by the pair's norm.
    """

    model = load_pretrained(path)
    half = model.config.head_dim // 2
    amax = [0.0]

    def k_hook(_m, _inp, out):
        k = out.view(*out.shape[:-1], -1, model.config.head_dim)
        amax[0] = max(amax[0], float(torch.sqrt(k[..., :half] ** 2 + k[..., half:] ** 2).max()))

    def v_hook(_m, _inp, out):
        amax[0] = max(amax[0], float(out.abs().max()))

    hooks = []
    for layer in model.model.layers:
        hooks.append(layer.self_attn.k_proj.register_forward_hook(k_hook))
        hooks.append(layer.self_attn.v_proj.register_forward_hook(v_hook))
    model(torch.tensor([sample_ids]))
    for h in hooks:
        h.remove()
    return amax[0] / 127.0
