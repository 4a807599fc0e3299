"""Hugging Face `transformers` loads the shipped weights and agrees with us."""
import pytest
import torch

from services.engine import LLM, SamplingParams
from services.model.tasks import TASKS, eval_set

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_model(model_path):
    return transformers.LlamaForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()


def test_transformers_logits_equal_our_reference_model(hf_model, reference_model, tokenizer):
    ids = torch.tensor([tokenizer.encode("story: the cat sees a dog. add: 12+34 -> ")])
    with torch.no_grad():
        ours = reference_model(ids)
        theirs = hf_model(ids).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_transformers_tokenizer_matches_ours(model_path, tokenizer):
    hf_tok = transformers.AutoTokenizer.from_pretrained(model_path)
    text = "sort: qwerty -> "
    assert hf_tok(text)["input_ids"] == tokenizer.encode(text)
    assert hf_tok.eos_token_id == tokenizer.eos_token_id


def test_transformers_greedy_continuation_equals_the_engine(model_path, hf_model, tokenizer):
    prompts = [e.prompt for t in TASKS if t != "story" for e in eval_set(t)[:5]]
    ours = LLM(model_path, dtype="float32").generate(prompts, SamplingParams(temperature=0, max_tokens=20))
    for prompt, out in zip(prompts, ours):
        ids = torch.tensor([tokenizer.encode(prompt)])
        gen = hf_model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                pad_token_id=tokenizer.pad_token_id)
        assert gen[0, ids.shape[1]:].tolist() == out.outputs[0].token_ids, prompt
