"""The `OpenAIIngress` deployment: OpenAI's HTTP API in front of the LLMServer replicas.

Requests are validated here (400 before a replica is bothered), then streamed
from one LLMServer replica chosen by Serve's router. The first item from the
replica says whether the engine accepted the request, so errors still get a
proper status code even when the client asked for a stream.
"""
# No `from __future__ import annotations` here: FastAPI must see the real `Request` class in the
# route signatures (string annotations on Serve's class-based views resolve as query parameters).
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle

from services.serve import protocol as p
from services.serve.admission import AdmissionLimit, IngressSettings, shed_error
from services.serve.config import ServeAppConfig

api = FastAPI(title="inference incident sandbox", docs_url=None, redoc_url=None)


class _Reply:
    """One generation in flight: the replica's stream, and what the client should see of it."""

    def __init__(self, gen, req: p._GenerationRequest, model: str, chat: bool):
        self.gen, self.req, self.model, self.chat = gen, req, model, chat
        self.id = p.new_id("chatcmpl" if chat else "cmpl")
        self.created = p.now()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.replica = None  # which LLMServer replica serves it, as a real router's `x-served-by`
        self.version = None  # and the deployment version it runs (`x-served-version`)

    async def start(self) -> None:
        """Wait for the replica to accept the request; raise APIError if it does not."""
        try:
            first = await self.gen.__anext__()
        except BackPressureError:
            raise p.APIError(503, "The server is overloaded; retry later.", code="overloaded") from None
        except StopAsyncIteration:
            raise p.APIError(500, "the engine closed the request without an answer") from None
        except Exception as e:  # noqa: BLE001 - a replica that died or is unreachable
            raise p.APIError(503, f"no engine replica could take the request: {type(e).__name__}",
                             code="replica_unavailable") from None
        if "error" in first:
            err = first["error"]
            raise p.APIError(err["status"], err["message"], code=err.get("code"))
        self.prompt_tokens = first["prompt_tokens"]
        self.replica = first.get("replica")
        self.version = first.get("version")

    def usage(self) -> dict:
        return p.usage(self.prompt_tokens, self.completion_tokens)

    async def items(self):
        """The replica's deltas; an error item, or a replica lost mid-stream, raises APIError(500)."""
        try:
            async for item in self.gen:
                if "error" in item:
                    err = item["error"]
                    raise p.APIError(err["status"], err["message"], code=err.get("code"))
                self.completion_tokens = item["completion_tokens"]
                yield item
        except p.APIError:
            raise
        except Exception as e:  # noqa: BLE001
            raise p.APIError(500, f"the engine replica failed mid-request: {type(e).__name__}") from None

    async def body(self) -> dict:
        text, finish = [], None
        async for item in self.items():
            text.append(item["text"])
            finish = item["finish_reason"] or finish
        build = p.chat_body if self.chat else p.completion_body
        return build(self.id, self.created, self.model, "".join(text), finish, self.usage())

    def _chunk(self, text: str | None, finish: str | None = None) -> bytes:
        if self.chat:
            delta = {} if text is None else {"content": text}
            return p.sse(p.chat_chunk(self.id, self.created, self.model, delta, finish))
        return p.sse(p.completion_chunk(self.id, self.created, self.model, text or "", finish))

    async def events(self):
        done = False
        try:
            if self.chat:
                yield p.sse(p.chat_chunk(self.id, self.created, self.model, {"role": "assistant", "content": ""}))
            try:
                async for item in self.items():
                    if item["text"]:
                        yield self._chunk(item["text"])
                    if item["finish_reason"]:
                        yield self._chunk(None, item["finish_reason"])
            except p.APIError as e:
                yield p.sse(e.body())
            if self.req.include_usage:
                obj = "chat.completion.chunk" if self.chat else "text_completion"
                yield p.sse(p.usage_chunk(self.id, self.created, self.model, obj, self.usage()))
            yield p.sse("[DONE]")
            done = True
        finally:
            if not done:  # the client went away: stop the replica's request too
                self.gen.cancel()


@serve.deployment(name="OpenAIIngress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000,
                  graceful_shutdown_timeout_s=120)
@serve.ingress(api)
class OpenAIIngress:
    def __init__(self, llm: DeploymentHandle, app_config: dict):
        cfg = ServeAppConfig.from_dict(app_config)
        self.llm = llm
        self.stream = llm.options(stream=True)
        self.model_name = cfg.model_name
        self.default_max_tokens = cfg.default_max_tokens
        self.created = p.now()
        self.admission = AdmissionLimit()  # no limit until the deployment's user_config sets one

    def reconfigure(self, user_config: dict) -> None:
        """The ingress's runtime settings (its deployment's user_config), applied in place."""
        self.admission.configure(IngressSettings.from_dict(user_config))

    @api.get("/v1/models")
    async def models(self):
        return p.models_body(self.model_name, self.created)

    @api.get("/health")
    async def health(self):
        try:
            info = await self.llm.info.remote()
        except Exception as e:  # noqa: BLE001
            return JSONResponse(p.APIError(503, f"no healthy engine replica: {type(e).__name__}").body(),
                                status_code=503)
        return {"status": "ok", "model": self.model_name, "version": info["version"]}

    @api.post("/v1/completions")
    async def completions(self, request: Request):
        return await self._generate(request, p.CompletionRequest, chat=False)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request):
        return await self._generate(request, p.ChatCompletionRequest, chat=True)

    async def _generate(self, request: Request, schema, chat: bool):
        reply = None
        admitted = False  # holds a place under the admission limit, to be given back when the response ends
        try:
            req = p.parse_request(await request.body(), schema)
            if req.model != self.model_name:
                raise p.APIError(404, f"The model `{req.model}` does not exist.", param="model",
                                 code="model_not_found")
            if not self.admission.try_enter():
                raise shed_error()
            admitted = True
            payload = {"request_id": p.new_id("req"), "prompt": req.engine_prompt(),
                       "sampling": req.sampling(req.engine_max_tokens(self.default_max_tokens))}
            reply = _Reply(self.stream.generate.remote(payload), req, self.model_name, chat)
            await reply.start()
            headers = {k: v for k, v in (("x-served-by", reply.replica), ("x-served-version", reply.version)) if v}
            if req.stream:
                admitted = False  # the stream gives it back when it ends
                return StreamingResponse(self._admitted(reply.events()), media_type="text/event-stream",
                                         headers=headers)
            return JSONResponse(await reply.body(), headers=headers)
        except p.APIError as e:
            return JSONResponse(e.body(), status_code=e.status)
        except BaseException:
            if reply is not None:  # cancelled (client gone) or failed: free the engine request
                reply.gen.cancel()
            raise
        finally:
            if admitted:
                self.admission.leave()

    async def _admitted(self, events):
        """A stream's events; its place under the admission limit is given back when it ends, however."""
        try:
            async for event in events:
                yield event
        finally:
            self.admission.leave()
