"""Bad requests get OpenAI-style errors with the right status, and the server keeps serving."""
import httpx
import openai
import pytest

pytestmark = pytest.mark.stack


def post(stack, path, content, **kw):
    return httpx.post(f"{stack.api_url}{path}", content=content, headers={"content-type": "application/json"},
                      timeout=30, **kw)


def assert_openai_error(resp, status, param=None):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    if param:
        assert err["param"] == param


def test_malformed_json_is_a_400(stack):
    assert_openai_error(post(stack, "/v1/completions", b'{"model": "x", "prompt": "a",'), 400)


def test_negative_max_tokens_is_a_400(stack):
    with pytest.raises(openai.BadRequestError) as e:
        stack.openai().completions.create(model=stack.model, prompt="copy: a -> ", max_tokens=-1)
    assert e.value.body["param"] == "max_tokens"


def test_an_unknown_model_is_a_404(stack):
    with pytest.raises(openai.NotFoundError) as e:
        stack.openai().chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["code"] == "model_not_found"


def test_a_huge_prompt_is_a_400_naming_the_context_length(stack):
    with pytest.raises(openai.BadRequestError) as e:
        stack.openai().completions.create(model=stack.model, prompt="a" * 50_000, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded" and "max_model_len" in e.value.body["message"]


def test_a_huge_streamed_prompt_is_a_400_before_any_event(stack):
    body = f'{{"model": "{stack.model}", "prompt": "{"b" * 5000}", "stream": true}}'.encode()
    assert_openai_error(post(stack, "/v1/completions", body), 400)


def test_wrong_types_are_a_400_naming_the_field(stack):
    body = f'{{"model": "{stack.model}", "messages": "hello"}}'.encode()
    assert_openai_error(post(stack, "/v1/chat/completions", body), 400, param="messages")


def test_a_seed_past_the_engines_range_is_a_400_and_the_replica_serves_on(stack):
    # Found while preparing the API fuzzer (an absurd seed on the engine): it killed the replica's engine for every client.
    for _ in range(2):  # both replicas, most likely
        with pytest.raises(openai.BadRequestError) as e:
            stack.openai().completions.create(model=stack.model, prompt="copy: a -> ", max_tokens=2, seed=10**30)
        assert "seed" in e.value.body["message"]
    out = stack.openai().completions.create(model=stack.model, prompt="copy: ab -> ", max_tokens=2, seed=5)
    assert out.usage.completion_tokens >= 1


def test_the_server_still_serves_after_bad_requests(stack):
    out = stack.openai().completions.create(model=stack.model, prompt="sort: cba -> ", max_tokens=4, temperature=0)
    assert out.usage.completion_tokens >= 1
