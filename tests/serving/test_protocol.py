"""The OpenAI wire format, without a server: what is accepted, what is a 400, and the shapes sent back."""
import json

import pytest

from services.serve import protocol as p


def parse(body, schema=p.CompletionRequest):
    return p.parse_request(json.dumps(body).encode() if not isinstance(body, bytes) else body, schema)


def test_malformed_json_is_a_400_naming_json():
    with pytest.raises(p.APIError) as e:
        parse(b'{"model": "m", "prompt": ')
    assert e.value.status == 400 and "JSON" in e.value.message
    assert e.value.body()["error"]["type"] == "invalid_request_error"


def test_negative_max_tokens_is_a_400_naming_the_param():
    with pytest.raises(p.APIError) as e:
        parse({"model": "m", "prompt": "hi", "max_tokens": -3})
    assert e.value.status == 400 and e.value.param == "max_tokens"


@pytest.mark.parametrize("field,value", [("temperature", -0.1), ("top_p", 0), ("n", 2), ("logprobs", 3),
                                         ("echo", True), ("prompt", ["a", "b"]), ("stop", ["a", ""])])
def test_what_the_engine_cannot_honour_is_refused(field, value):
    with pytest.raises(p.APIError) as e:
        parse({"model": "m", "prompt": "hi", field: value})
    assert e.value.status == 400 and e.value.param == field


def test_completion_request_maps_to_sampling_params():
    req = parse({"model": "m", "prompt": ["sort: cba -> "], "temperature": 0, "stop": "x", "seed": 7,
                 "unknown_field": 1})
    assert req.engine_prompt() == "sort: cba -> "
    assert req.sampling(req.engine_max_tokens(64)) == {
        "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_tokens": 16, "stop": ["x"], "seed": 7,
        "ignore_eos": False}


def test_chat_template_puts_system_lines_before_the_turns():
    req = parse({"model": "m", "messages": [{"role": "system", "content": "be exact"},
                                            {"role": "user", "content": [{"type": "text", "text": "add: 1+2 -> "}]}],
                 "max_completion_tokens": 5}, p.ChatCompletionRequest)
    assert req.engine_prompt() == "be exact\nadd: 1+2 -> "
    assert req.engine_max_tokens(64) == 5


def test_chat_without_max_tokens_uses_the_server_default():
    req = parse({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, p.ChatCompletionRequest)
    assert req.engine_max_tokens(64) == 64


def test_empty_messages_are_a_400():
    with pytest.raises(p.APIError) as e:
        parse({"model": "m", "messages": []}, p.ChatCompletionRequest)
    assert e.value.param == "messages"


def test_sse_frames_and_chunk_shapes():
    assert p.sse("[DONE]") == b"data: [DONE]\n\n"
    chunk = p.chat_chunk("id", 1, "m", {"content": "x"})
    assert chunk["object"] == "chat.completion.chunk" and chunk["choices"][0]["delta"] == {"content": "x"}
    body = p.completion_body("id", 1, "m", "abc", "length", p.usage(3, 2))
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_server_errors_are_typed_server_error():
    assert p.APIError(503, "busy").body()["error"]["type"] == "server_error"
