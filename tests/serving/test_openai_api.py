"""The OpenAI-compatible API, through the official `openai` client and raw HTTP."""
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytestmark = pytest.mark.stack


def test_models_lists_the_served_model(stack):
    models = stack.openai().models.list()
    assert [m.id for m in models.data] == [stack.model]


def test_health_reports_ok_and_the_version(stack):
    resp = httpx.get(f"{stack.api_url}/health", timeout=10)
    assert resp.status_code == 200 and resp.json()["version"] == stack.state.version


def test_every_answer_names_the_replica_that_served_it(stack):
    body = {"model": stack.model, "prompt": "copy: abc -> ", "max_tokens": 4, "temperature": 0}
    plain = httpx.post(f"{stack.api_url}/v1/completions", json=body, timeout=30)
    streamed = httpx.post(f"{stack.api_url}/v1/completions", json={**body, "stream": True}, timeout=30)
    for resp in (plain, streamed):
        assert resp.status_code == 200 and len(resp.headers["x-served-by"]) >= 4  # a Serve replica id
        assert resp.headers["x-served-version"] == stack.state.version


def test_openai_client_completes_without_streaming(stack):
    out = stack.openai().completions.create(model=stack.model, prompt="copy: abcd -> ", max_tokens=8,
                                            temperature=0)
    assert out.object == "text_completion" and out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.prompt_tokens == len("copy: abcd -> ") + 1  # characters plus <bos>
    assert 1 <= out.usage.completion_tokens <= 8


def test_openai_client_streams_chat_completions(stack):
    stream = stack.openai().chat.completions.create(
        model=stack.model, messages=[{"role": "user", "content": "reverse: abcdef -> "}], max_tokens=12,
        temperature=0, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text and finish == ["length"]  # 12 tokens; an ignored <eos> decodes to no text
    assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == len("reverse: abcdef -> ") + 1


def test_openai_client_chat_without_streaming_matches_the_stream(stack):
    messages = [{"role": "user", "content": "sort: dcba -> "}]
    client = stack.openai()
    whole = client.chat.completions.create(model=stack.model, messages=messages, max_tokens=10, temperature=0)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=stack.model, messages=messages, max_tokens=10, temperature=0, stream=True) if c.choices)
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].message.content == streamed


def test_stop_strings_cut_the_text_and_finish_with_stop(stack):
    client = stack.openai()
    prompt = "copy: qwertyuiop -> "
    full = client.completions.create(model=stack.model, prompt=prompt, max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = full[3:5]
    cut = client.completions.create(model=stack.model, prompt=prompt, max_tokens=24, temperature=0,
                                    stop=[stop], extra_body={"ignore_eos": True}).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[: full.find(stop)]


def test_a_seed_makes_sampling_repeatable(stack):
    client = stack.openai()
    texts = {client.completions.create(model=stack.model, prompt="story: a ", max_tokens=16, temperature=1.0,
                                       seed=1234, extra_body={"ignore_eos": True}).choices[0].text
             for _ in range(3)}
    assert len(texts) == 1


def test_concurrent_requests_share_a_running_batch(stack):
    client = stack.openai(timeout=120)

    def one(i):
        return client.completions.create(model=stack.model, prompt=f"copy: {'abcdefgh'[:i + 1]} -> ",
                                         max_tokens=48, temperature=0, extra_body={"ignore_eos": True})

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(one, range(8)))
    assert all(o.usage.completion_tokens == 48 for o in outs)
    # 8 requests over 2 replicas: some replica runs several of them in one batch. The gauge reaches
    # Prometheus as Ray exports it (each second) and Prometheus scrapes Ray (each 2 s): on a fast CPU
    # 48 tokens took under a second and no scrape saw the batch. So the answers go on streaming until
    # a scrape has seen it, then are cut (the servers abort them), however fast the machine.
    stop = threading.Event()
    chunks = [0] * 8

    def streaming(i):
        stream = client.completions.create(model=stack.model, prompt=f"copy: {'abcdefgh'[:i + 1]} -> ",
                                           max_tokens=900, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        with stream:
            for _ in stream:
                chunks[i] += 1
                if stop.is_set():
                    break

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(streaming, i) for i in range(8)]
        try:
            running, _ = stack.wait_for("max(max_over_time(vllm:num_requests_running[1m]))", lambda v: v >= 2,
                                        timeout_s=60)
        finally:
            stop.set()
        for f in futures:
            f.result()
    assert running >= 2
    assert all(n >= 1 for n in chunks)


def test_a_client_that_disconnects_aborts_its_request(stack):
    before = stack.value('sum(vllm:request_success_total{finished_reason="abort"})')
    body = {"model": stack.model, "prompt": "copy: abc -> ", "max_tokens": 900, "temperature": 0,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{stack.api_url}/v1/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for _ in range(3):
            next(lines)
    stack.wait_for('sum(vllm:request_success_total{finished_reason="abort"})', lambda v: v >= before + 1)
    stack.wait_for("sum(vllm:num_requests_running)", lambda v: v == 0)
    stack.wait_for("max(vllm:kv_cache_usage_perc)", lambda v: v == 0)


def test_a_client_that_stops_reading_after_a_few_chunks_gets_them_and_the_server_aborts_the_rest(stack):
    import asyncio
    import random

    from incidents.profiles import get_profile
    from sandbox.traffic.generator import send_request

    before = stack.value('sum(vllm:request_success_total{finished_reason="abort"})')
    req = get_profile("documents").sample(random.Random(5))

    async def main():
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as client:
            return await send_request(client, req, stack.model)

    result = asyncio.run(main())
    assert result.status == "200" and result.completion_tokens == req.close_after_chunks < req.max_tokens
    stack.wait_for('sum(vllm:request_success_total{finished_reason="abort"})', lambda v: v >= before + 1)
