"""The serving engine. `from services.engine import LLM, SamplingParams`.

Names are resolved lazily so the torch-free core (`scheduler`, `block_pool`,
`sequence`, `kv_cache_manager`) can be imported without pulling in torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "LLM": "services.engine.llm",
    "LLMEngine": "services.engine.llm_engine",
    "EngineStats": "services.engine.stats",
    "DeviceOutOfMemoryError": "services.engine.memory",
    "EngineConfig": "services.engine.config",
    "SamplingParams": "services.engine.sampling_params",
    "RequestOutput": "services.engine.outputs",
    "CompletionOutput": "services.engine.outputs",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'services.engine' has no attribute {name!r}")
