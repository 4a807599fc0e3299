"""From engine state to what a caller sees: stop strings, streamed deltas, `RequestOutput`s.

Stop strings are text, not tokens, so they are checked on the decoded output after each step; a
tail that could still grow into a stop string is held back from the stream until it cannot.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from services.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from services.engine.sampling_params import SamplingParams
from services.engine.sequence import Request, RequestStatus
from services.model.tokenizer import CharTokenizer


@dataclass
class RequestState:
    """What the engine keeps of a request beside the scheduler's `Request`."""
    request: Request
    prompt: str | None
    params: SamplingParams
    generator: torch.Generator
    sent_text_len: int = 0  # characters of output already streamed
    sent_tokens: int = 0
    stop_reason: str | None = None  # the stop string that ended it


class OutputProcessor:
    def __init__(self, tokenizer: CharTokenizer):
        self.tokenizer = tokenizer

    def stopped_by_strings(self, scheduled, states: dict[str, RequestState], scheduler) -> list[Request]:
        """Finish the scheduled requests whose output now holds one of their stop strings."""
        stopped = []
        for s in scheduled:
            st = states[s.request.request_id]
            if not st.params.stop or s.request.is_finished:
                continue
            text = self.tokenizer.decode(s.request.output_token_ids)
            for stop in st.params.stop:
                if stop in text:
                    st.stop_reason = stop
                    stopped += scheduler.finish_requests([s.request.request_id], RequestStatus.FINISHED_STOPPED)
                    break
        return stopped

    def output(self, st: RequestState) -> RequestOutput:
        """The request as it stands, with what is new since the last output as the delta."""
        req = st.request
        text = self.tokenizer.decode(req.output_token_ids)
        finished = req.is_finished
        if st.stop_reason is not None:
            text = text[: text.find(st.stop_reason)]
        elif not finished and st.params.stop:
            # Hold back a tail that might still become a stop string.
            hold = max(len(s) for s in st.params.stop) - 1
            text = text[: max(st.sent_text_len, len(text) - hold)]
        delta_text, delta_ids = text[st.sent_text_len:], req.output_token_ids[st.sent_tokens:]
        st.sent_text_len, st.sent_tokens = len(text), req.num_output_tokens
        reason = RequestStatus.finished_reason(req.status) if finished else None
        stop_reason = st.stop_reason
        if reason == "stop" and stop_reason is None and req.output_token_ids and req.output_token_ids[-1] != req.eos_token_id:
            stop_reason = req.output_token_ids[-1]
        metrics = RequestMetrics(req.arrival_time, req.first_scheduled_time, req.first_token_time,
                                 req.last_token_time, req.finished_time, req.num_cached_tokens or 0,
                                 req.num_preemptions)
        return RequestOutput(req.request_id, st.prompt, list(req.prompt_token_ids),
                             [CompletionOutput(0, text, list(req.output_token_ids), reason, stop_reason)],
                             finished, metrics, delta_text, list(delta_ids))
