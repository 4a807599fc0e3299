"""OpenAI wire format: request schemas, response and SSE chunk bodies, error bodies.

Only what the engine honours is accepted: `temperature`, `top_p`, `max_tokens`
(`max_completion_tokens` for chat), `stop`, `seed`, `stream`
(`stream_options.include_usage`), plus vLLM's `top_k` and `ignore_eos`. Asking
for something it cannot do (`n` > 1, `logprobs`, `echo`, several prompts) is a
400, not a silent default. Unknown fields are ignored, as OpenAI's server does.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class APIError(Exception):
    """An error the API answers with OpenAI's error JSON and an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    include_usage: bool = False


class _GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="only n=1 is served")
    ignore_eos: bool = False
    logprobs: bool | int | None = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v):
        items = [v] if isinstance(v, str) else (v or [])
        if len(items) > 4 or not all(items):
            raise ValueError("stop must be up to 4 non-empty strings")
        return items or None

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v):
        if v not in (None, False, 0):
            raise ValueError("logprobs are not supported")

    def sampling(self, max_tokens: int) -> dict:
        """SamplingParams keyword arguments (plain data, to cross to a replica)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "max_tokens": max_tokens, "stop": list(self.stop or []), "seed": self.seed,
                "ignore_eos": self.ignore_eos}

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str]
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("exactly one prompt per request is served")
            v = v[0]
        if not v:
            raise ValueError("prompt must not be empty")
        return v

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v):
        if v:
            raise ValueError("echo is not supported")
        return v

    def engine_prompt(self) -> str:
        return self.prompt

    def engine_max_tokens(self, default: int) -> int:
        return self.max_tokens or 16  # OpenAI's completions default


class ContentPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    def engine_prompt(self) -> str:
        """The chat template: system lines, then the turns, so one user message is its own prompt."""
        return "".join(m.text() + "\n" if m.role in ("system", "developer") else m.text() for m in self.messages)

    def engine_max_tokens(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


def parse_request(raw: bytes, schema: type[_GenerationRequest]) -> _GenerationRequest:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise APIError(400, f"{param}: {err['msg']}" if param else err["msg"], param=param) from None


# -- responses ----------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(rid, created, model, text, finish_reason, use) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
            "usage": use}


def completion_chunk(rid, created, model, text, finish_reason=None) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def chat_body(rid, created, model, text, finish_reason, use) -> dict:
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": use}


def chat_chunk(rid, created, model, delta: dict, finish_reason=None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(rid, created, model, obj: str, use: dict) -> dict:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": use}


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def models_body(model_name: str, created: int) -> dict:
    return {"object": "list",
            "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "sandbox"}]}
