"""The OpenAI API fuzzed from its own schema (schemathesis): a client's mistake is never a 500, every error
is OpenAI's error JSON, and the server serves the next valid request.

The schema is the one the ingress validates with (services/serve/protocol.py's pydantic models), as
OpenAPI. Schemathesis draws bodies that fit it (positive) and bodies that break it one way at a time
(negative: a wrong type, a missing field, a value out of range, an unknown model), with a fixed seed
and a bounded budget. Valid requests are kept short (at most 8 tokens each) so the budget goes on
the requests' variety, not on generation; a stream is sometimes cut by the client after its first
event.
"""
from __future__ import annotations

import json

import httpx
import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NotSet

from services.serve import protocol as p
from tests.mutations import fuzz

pytestmark = pytest.mark.stack

EXAMPLES = 20  # per operation and mode: 80 requests in all
MAX_NEW_TOKENS = 8
ERROR_KEYS = {"message", "type", "param", "code"}


def openapi(model: str) -> dict:
    """protocol.py's request models as an OpenAPI 3.1 document; `model` the one name that is served."""
    ops, defs = {}, {}
    for path, cls in (("/v1/completions", p.CompletionRequest), ("/v1/chat/completions", p.ChatCompletionRequest)):
        body = cls.model_json_schema(ref_template="#/components/schemas/{model}")
        defs.update(body.pop("$defs", {}))
        if "ChatMessage" in defs:  # an empty message is an empty prompt
            defs["ChatMessage"]["properties"]["content"]["anyOf"][0]["minLength"] = 1
        _serves_only_what_it_serves(body, model)
        error = {"type": "object", "required": ["error"],
                 "properties": {"error": {"type": "object", "required": sorted(ERROR_KEYS)}}}
        ops[path] = {"post": {
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"200": {"description": "a completion, or its event stream"},
                          **{s: {"description": "OpenAI's error JSON", "content": {"application/json": {
                              "schema": error}}} for s in ("400", "404", "503")}}}}
    return {"openapi": "3.1.0", "info": {"title": "inference incident sandbox", "version": "1"}, "paths": ops,
            "components": {"schemas": defs}}


def _serves_only_what_it_serves(body: dict, model: str) -> None:
    """The constraints protocol.py's validators add to the models' types, written into the schema, so that a
    positive case is one the server serves (an empty prompt, `echo`, logprobs or five stop strings are
    400s, which the negative cases cover): one model, short answers (see the module's docstring)."""
    props = body["properties"]
    props["model"]["enum"] = [model]
    for key in ("max_tokens", "max_completion_tokens"):
        if key in props:
            props[key]["anyOf"][0]["maximum"] = MAX_NEW_TOKENS
    if "prompt" in props:
        props["prompt"]["anyOf"] = [{"type": "string", "minLength": 1},
                                    {"type": "array", "items": {"type": "string", "minLength": 1},
                                     "minItems": 1, "maxItems": 1}]
    if "echo" in props:
        props["echo"] = {"const": False}
    props["logprobs"] = {"anyOf": [{"const": False}, {"type": "null"}]}
    props["stop"]["anyOf"] = [{"type": "string", "minLength": 1},
                              {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 4},
                              {"type": "null"}]


def cases(model: str):
    schema = schemathesis.openapi.from_dict(openapi(model))
    return st.one_of(*(schema[path]["POST"].as_strategy(generation_mode=mode)
                       for path in ("/v1/completions", "/v1/chat/completions")
                       for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)))


def _shorten(body):
    """A valid length past MAX_NEW_TOKENS (a negative case's 9 or 200) generates for seconds on a CPU: cut to
    the bound. An absurd one (0, -1, 10**12, a string) is what is being tested, and stays."""
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens"):
            v = body.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and MAX_NEW_TOKENS < v <= 4096:
                body[key] = MAX_NEW_TOKENS
    return body


@pytest.fixture(scope="module")
def client(stack):
    with httpx.Client(base_url=stack.api_url, timeout=60) as c:
        yield c


def _check(resp: httpx.Response) -> None:
    if resp.status_code == 200:
        return
    assert resp.status_code < 500 or resp.json()["error"]["code"] == "overloaded", resp.text[:500]
    err = resp.json()["error"]
    assert set(err) == ERROR_KEYS and err["message"], resp.text[:500]


def test_fuzzed_requests_get_openai_errors_never_a_500_and_the_server_keeps_serving(stack, client):
    tally: dict = {}

    @fuzz(4 * EXAMPLES)
    @given(case=cases(stack.model), cut=st.booleans())
    def one(case, cut):
        body = _shorten(case.body)
        if isinstance(body, NotSet):
            raw = b""  # no body at all
        elif isinstance(body, (bytes, str)):
            raw = body
        else:
            raw = json.dumps(body, allow_nan=True)
        stream = isinstance(body, dict) and body.get("stream") is True
        with client.stream("POST", case.path, content=raw, headers={"content-type": "application/json"}) as resp:
            if stream and cut and resp.status_code == 200:
                next(resp.iter_lines())  # the client goes away after the first event
                tally["cut"] = tally.get("cut", 0) + 1
                return
            resp.read()
        _check(resp)
        tally[resp.status_code] = tally.get(resp.status_code, 0) + 1

    one()
    print(f"\nfuzzed requests by status: {tally}")
    assert sum(tally.values()) >= 4 * EXAMPLES * 0.9  # hypothesis may drop a few duplicates
    assert tally.get(200, 0) + tally.get("cut", 0) >= 10 and tally.get(400, 0) >= 10, tally
    out = stack.openai().completions.create(model=stack.model, prompt="sort: cba -> ", max_tokens=4, temperature=0)
    assert out.usage.completion_tokens >= 1
