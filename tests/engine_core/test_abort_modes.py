"""How abort_requests releases KV blocks: "inline" frees them, "deferred" never does."""
import pytest

from services.engine.block_pool import BlockPool
from services.engine.kv_cache_manager import KVCacheManager
from services.engine.scheduler import Scheduler, SchedulerConfig
from services.engine.sequence import RequestStatus

from .helpers import FakeClock, check_kv_invariants, make_request, run_step


def scheduler(abort_mode: str, num_blocks: int = 16) -> Scheduler:
    kv = KVCacheManager(BlockPool(num_blocks, True), 4, True)
    return Scheduler(SchedulerConfig(8, 32, True), kv, FakeClock(), abort_mode=abort_mode)


def abort_after_one_step(sched: Scheduler, rid: str, prompt: list[int]) -> None:
    sched.add_request(make_request(rid, prompt, max_tokens=8))
    run_step(sched)  # prefill: 10 prompt tokens -> 3 blocks of 4
    sched.abort_requests([rid])


def test_unknown_abort_mode_is_refused():
    with pytest.raises(ValueError, match="abort_mode"):
        scheduler("later")


def test_inline_abort_returns_every_block_to_the_pool():
    sched = scheduler("inline")
    for i in range(3):
        abort_after_one_step(sched, f"r{i}", [10 * i + j for j in range(10)])
        assert sched.kv_cache_manager.usage == 0.0
    assert sched.deferred_release == []
    check_kv_invariants(sched.kv_cache_manager)


def test_deferred_abort_keeps_the_blocks_owned_so_usage_climbs_with_every_abort():
    sched = scheduler("deferred")
    kv, usage = sched.kv_cache_manager, []
    for i in range(3):
        abort_after_one_step(sched, f"r{i}", [10 * i + j for j in range(10)])
        usage.append(kv.usage)
    assert usage == [3 / 16, 6 / 16, 9 / 16]
    assert [r.request_id for r in sched.deferred_release] == ["r0", "r1", "r2"]
    assert all(r.status is RequestStatus.FINISHED_ABORTED for r in sched.deferred_release)
    assert not sched.has_unfinished_requests() and sched.num_running == 0
    held = [b for rid in ("r0", "r1", "r2") for b in kv.req_to_blocks[rid]]
    assert len(held) == 9 and all(b.ref_cnt == 1 for b in held)
    check_kv_invariants(kv)  # ref counts match the tables that still hold them


def test_deferred_abort_leaves_finished_requests_releasing_normally():
    sched = scheduler("deferred")
    sched.add_request(make_request("done", [1, 2, 3], max_tokens=1))
    _, finished = run_step(sched)
    assert [r.request_id for r in finished] == ["done"]
    assert sched.kv_cache_manager.usage == 0.0


def test_leaked_blocks_eventually_starve_new_requests():
    sched = scheduler("deferred", num_blocks=8)
    abort_after_one_step(sched, "a", list(range(10)))
    abort_after_one_step(sched, "b", list(range(20, 30)))
    assert sched.kv_cache_manager.num_free_blocks == 2
    sched.add_request(make_request("c", list(range(40, 50)), max_tokens=2))
    out = sched.schedule()  # 10 prompt tokens need 3 blocks; only 2 are free
    assert out.scheduled == [] and sched.num_waiting == 1
