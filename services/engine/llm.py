"""The offline API: `LLM(model=path).generate(prompts, SamplingParams(...))`."""
from __future__ import annotations

from services.engine.config import EngineConfig
from services.engine.llm_engine import LLMEngine
from services.engine.outputs import RequestOutput
from services.engine.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str, **engine_config):
        self.llm_engine = LLMEngine(EngineConfig(model=model, **engine_config))

    @classmethod
    def from_engine(cls, engine: LLMEngine) -> LLM:
        """The offline API over an engine built elsewhere (e.g. from a replaced EngineConfig)."""
        llm = cls.__new__(cls)
        llm.llm_engine = engine
        return llm

    def get_tokenizer(self):
        return self.llm_engine.get_tokenizer()

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """One output per prompt, in prompt order. Prompts are strings or token-id lists."""
        single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
        prompts = [prompts] if single else list(prompts)
        if isinstance(sampling_params, list):
            if len(sampling_params) != len(prompts):
                raise ValueError("sampling_params list must have one entry per prompt")
            params = sampling_params
        else:
            params = [sampling_params or SamplingParams()] * len(prompts)
        engine = self.llm_engine
        ids = [engine.add_request(None, p, sp) for p, sp in zip(prompts, params)]
        done: dict[str, RequestOutput] = {}
        try:
            while engine.has_unfinished_requests():
                for out in engine.step():
                    if out.finished:
                        done[out.request_id] = out
        except BaseException:
            engine.abort_request([i for i in ids if i not in done])
            raise
        return [done[i] for i in ids]
