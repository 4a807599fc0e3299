"""The engine on the Triton kernels (interpreted on CPU) matches the torch path."""
import os

import pytest

from services.engine import LLM, SamplingParams


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not __import__("torch").cuda.is_available(),
                    reason="needs TRITON_INTERPRET=1 (set by tests/conftest.py) or a GPU")
def test_triton_backend_generates_the_same_greedy_tokens_as_torch(model_path):
    # a prefill step and a decode step of two sequences of different lengths: every kernel, each path once
    # (interpreted, each step takes about 20 s here)
    params = SamplingParams(temperature=0, max_tokens=2)
    prompts = ["sort: dcba -> ", "copy: xy -> "]
    torch_out = LLM(model_path, dtype="float32", kernel_backend="torch", batch_invariant=True).generate(prompts, params)
    triton_out = LLM(model_path, dtype="float32", kernel_backend="triton", batch_invariant=True,
                     num_gpu_blocks=8).generate(prompts, params)
    assert [o.outputs[0].token_ids for o in triton_out] == [o.outputs[0].token_ids for o in torch_out]
