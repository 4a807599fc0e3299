import pytest

from services.engine.scheduler import SchedulerConfig
from services.engine.sequence import RequestStatus, finished_reason

from .helpers import FakeClock, check_scheduler_invariants, make_request, make_scheduler, run_step


def plan(out):
    """{request_id: (num_computed_tokens, num_new_tokens, samples)} of one step."""
    return {s.request.request_id: (s.num_computed_tokens, s.num_new_tokens, s.samples) for s in out.scheduled}


def test_long_prompt_is_prefilled_in_exact_chunks_with_chunked_prefill():
    sched = make_scheduler(budget=8, chunked=True)
    r = make_request("r", list(range(20)), max_tokens=2)
    sched.add_request(r)
    chunks = []
    for _ in range(3):
        out, _ = run_step(sched)
        chunks.append(plan(out)["r"])
        check_scheduler_invariants(sched, out)
    assert chunks == [(0, 8, False), (8, 8, False), (16, 4, True)]
    assert r.output_token_ids == [20] and r.num_computed_tokens == 20


def test_prefill_chunk_shares_the_budget_with_running_decodes():
    sched = make_scheduler(budget=8, chunked=True)
    sched.add_request(make_request("a", [1, 2, 3]))
    run_step(sched)
    sched.add_request(make_request("b", list(range(20))))
    out, _ = run_step(sched)
    assert plan(out) == {"a": (3, 1, True), "b": (0, 7, False)}
    assert out.num_batched_tokens == 8


def test_prompt_longer_than_the_budget_is_refused_without_chunked_prefill():
    sched = make_scheduler(budget=8, chunked=False)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        sched.add_request(make_request("r", list(range(9))))


def test_without_chunked_prefill_a_prompt_waits_for_a_step_it_fits_in():
    sched = make_scheduler(budget=10, chunked=False)
    sched.add_request(make_request("a", list(range(6))))
    sched.add_request(make_request("b", list(range(10, 16))))
    out, _ = run_step(sched)
    assert plan(out) == {"a": (0, 6, True)}
    out, _ = run_step(sched)
    assert plan(out) == {"a": (6, 1, True), "b": (0, 6, True)}


def test_max_num_seqs_is_respected():
    sched = make_scheduler(max_num_seqs=2)
    for rid in "abc":
        sched.add_request(make_request(rid, [1, 2], max_tokens=2))
    out, _ = run_step(sched)
    assert list(plan(out)) == ["a", "b"] and sched.num_waiting == 1
    out, finished = run_step(sched)
    assert [r.request_id for r in finished] == ["a", "b"]
    out, _ = run_step(sched)
    assert list(plan(out)) == ["c"]


def test_last_running_request_is_preempted_under_block_pressure_and_recomputed():
    sched = make_scheduler(num_blocks=4, block_size=2, caching=False)
    a = make_request("a", [1, 2, 3], max_tokens=4)
    b = make_request("b", [10, 11, 12], max_tokens=4)
    sched.add_request(a)
    sched.add_request(b)
    kv = sched.kv_cache_manager
    run_step(sched)
    assert (kv.get_block_table("a"), kv.get_block_table("b")) == ([0, 1], [2, 3])
    run_step(sched)  # slot 3 still fits in each request's second block

    out, _ = run_step(sched)  # a needs a third block: b, the last running, gives its blocks up
    assert out.preempted_request_ids == ["b"] and plan(out) == {"a": (4, 1, True)}
    assert kv.get_block_table("a") == [0, 1, 3]
    assert b.status is RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert b.output_token_ids == [13, 14] and b.num_preemptions == 1
    assert list(sched.waiting) == [b]
    check_scheduler_invariants(sched, out)

    out, finished = run_step(sched)  # b needs 3 blocks, only 1 free: not admitted yet
    assert plan(out) == {"a": (5, 1, True)} and finished == [a]
    out, _ = run_step(sched)  # recompute prompt + both outputs, then sample
    assert plan(out) == {"b": (0, 5, True)}
    assert kv.get_block_table("b") == [2, 3, 1]
    while sched.has_unfinished_requests():
        out, _ = run_step(sched)
        check_scheduler_invariants(sched, out)
    assert a.output_token_ids == [4, 5, 6, 7]
    assert b.output_token_ids == [13, 14, 15, 16]
    assert sched.num_preemptions_total == 1
    assert kv.num_free_blocks == 4


def test_a_request_that_could_never_fit_the_pool_is_refused():
    sched = make_scheduler(num_blocks=2, block_size=4)
    with pytest.raises(ValueError, match="KV blocks"):
        sched.add_request(make_request("r", [1, 2, 3], max_tokens=7))  # 9 slots > 8


def test_abort_of_a_waiting_and_of_a_running_request():
    sched = make_scheduler(num_blocks=8, max_num_seqs=1)
    a = make_request("a", [1, 2, 3])
    b = make_request("b", [4, 5, 6])
    sched.add_request(a)
    sched.add_request(b)
    run_step(sched)
    assert a.status is RequestStatus.RUNNING and b.status is RequestStatus.WAITING
    assert sched.abort_requests(["b", "unknown"]) == [b]
    assert sched.abort_requests(["a"]) == [a]
    assert finished_reason(a.status) == finished_reason(b.status) == "abort"
    assert a.finished_time is not None
    assert not sched.has_unfinished_requests()
    assert sched.kv_cache_manager.num_free_blocks == 8
    assert sched.schedule().scheduled == []


def test_a_request_aborted_between_schedule_and_update_is_skipped():
    sched = make_scheduler()
    r = make_request("r", [1, 2, 3])
    sched.add_request(r)
    out = sched.schedule()
    sched.abort_requests(["r"])
    assert sched.update_from_output(out, {"r": [4]}) == []
    assert r.output_token_ids == [] and r.status is RequestStatus.FINISHED_ABORTED


@pytest.mark.parametrize("kwargs, sampled, outputs, status", [
    (dict(eos_token_id=7), [5, 7, 9], [5, 7], RequestStatus.FINISHED_STOPPED),
    (dict(eos_token_id=7, ignore_eos=True, max_tokens=3), [7, 7, 7], [7, 7, 7], RequestStatus.FINISHED_LENGTH),
    (dict(stop_token_ids=(8, 9)), [5, 9, 1], [5, 9], RequestStatus.FINISHED_STOPPED),
    (dict(max_tokens=2), [5, 6, 7], [5, 6], RequestStatus.FINISHED_LENGTH),
])
def test_stop_conditions(kwargs, sampled, outputs, status):
    sched = make_scheduler()
    r = make_request("r", [1, 2], **kwargs)
    sched.add_request(r)
    finished = []
    for token in sampled:
        if finished:
            break
        _, finished = run_step(sched, {"r": [token]})
    assert finished == [r]
    assert r.output_token_ids == outputs and r.status is status
    assert sched.kv_cache_manager.num_free_blocks == sched.kv_cache_manager.block_pool.num_blocks


def test_finish_requests_stops_a_request_for_a_stop_string():
    sched = make_scheduler()
    sched.add_request(make_request("r", [1, 2]))
    run_step(sched)
    (r,) = sched.finish_requests(["r"], RequestStatus.FINISHED_STOPPED)
    assert finished_reason(r.status) == "stop" and sched.num_running == 0
    with pytest.raises(ValueError, match="FINISHED"):
        sched.finish_requests(["r"], RequestStatus.RUNNING)


def test_spec_tokens_are_scheduled_as_one_plus_k_and_rejected_ones_roll_back():
    sched = make_scheduler(num_spec_tokens=3)
    r = make_request("r", [1, 2, 3])
    sched.add_request(r)
    run_step(sched)  # prefill, samples 4
    sched.update_draft_token_ids({"r": [5, 6, 9, 10]})  # capped to 3 drafts
    out = sched.schedule()
    (item,) = out.scheduled
    assert (item.num_computed_tokens, item.num_new_tokens, item.spec_token_ids, item.samples) == (3, 4, (5, 6, 9), True)
    # The model accepts 5 and 6, rejects 9 and samples 7 instead.
    sched.update_from_output(out, {"r": [5, 6, 7]})
    assert r.output_token_ids == [4, 5, 6, 7]
    assert r.num_computed_tokens == 3 + 4 - 1 == r.num_tokens - 1
    assert r.spec_token_ids == []


@pytest.mark.parametrize("num_spec_tokens, table", [(0, [0]), (3, [0, 1])])
def test_speculative_decoding_reserves_lookahead_slots_for_the_draft_model(num_spec_tokens, table):
    sched = make_scheduler(block_size=4, num_spec_tokens=num_spec_tokens)
    sched.add_request(make_request("r", [1, 2, 3, 4]))
    sched.schedule()
    assert sched.kv_cache_manager.get_block_table("r") == table  # 4 tokens (+ 3 lookahead slots)


def test_tokens_after_a_stop_inside_accepted_drafts_are_dropped():
    sched = make_scheduler(num_spec_tokens=2)
    r = make_request("r", [1, 2, 3], eos_token_id=5)
    sched.add_request(r)
    run_step(sched)
    sched.update_draft_token_ids({"r": [5, 6]})
    _, finished = run_step(sched, {"r": [5, 6, 7]})
    assert finished == [r] and r.output_token_ids == [4, 5]


def test_drafts_that_do_not_fit_the_budget_are_dropped():
    sched = make_scheduler(budget=3, num_spec_tokens=4)
    r = make_request("r", [1, 2])
    sched.add_request(r)
    run_step(sched)
    sched.update_draft_token_ids({"r": [4, 5, 6, 7]})
    out = sched.schedule()
    assert out.scheduled[0].spec_token_ids == (4, 5) and out.num_batched_tokens == 3


def test_prefix_hit_is_recorded_and_skips_prefill_in_the_scheduler():
    sched = make_scheduler(block_size=4)
    sched.add_request(make_request("a", list(range(10))))
    run_step(sched)
    b = make_request("b", list(range(9)))
    sched.add_request(b)
    out, _ = run_step(sched)
    assert plan(out)["b"] == (8, 1, True) and b.num_cached_tokens == 8
    stats = sched.stats()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (19, 8)
    assert (stats.num_running, stats.num_waiting) == (2, 0)


def test_timestamps_come_from_the_clock():
    clock = FakeClock()
    sched = make_scheduler(clock=clock)
    r = make_request("r", [1, 2], max_tokens=2)
    sched.add_request(r)
    clock.now = 1.0
    run_step(sched)
    clock.now = 2.0
    run_step(sched)
    assert (r.first_scheduled_time, r.first_token_time, r.last_token_time, r.finished_time) == (1.0, 1.0, 2.0, 2.0)


def test_schedule_twice_without_update_raises():
    sched = make_scheduler()
    sched.add_request(make_request("r", [1]))
    sched.schedule()
    with pytest.raises(RuntimeError, match="update_from_output"):
        sched.schedule()


@pytest.mark.parametrize("field, kwargs", [
    ("max_num_seqs", dict(max_num_seqs=0)),
    ("max_num_batched_tokens", dict(max_num_batched_tokens=-1)),
    ("num_spec_tokens", dict(num_spec_tokens=-1)),
    ("enable_chunked_prefill", dict(enable_chunked_prefill="yes")),
])
def test_invalid_scheduler_config_names_the_field(field, kwargs):
    base = dict(max_num_seqs=4, max_num_batched_tokens=16, enable_chunked_prefill=True)
    with pytest.raises(ValueError, match=field):
        SchedulerConfig(**{**base, **kwargs})


def test_invalid_request_names_the_field():
    with pytest.raises(ValueError, match="prompt_token_ids"):
        make_request("r", [])
    with pytest.raises(ValueError, match="max_tokens"):
        make_request("r", [1], max_tokens=0)
