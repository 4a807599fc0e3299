"""shed-load's default limit: the most the engines held at once in the drill's healthy baseline."""
import json


from sandbox.drill.record import RunRecord
from sandbox.mitigation import shed_limit
from tests.promql_series import promtool_test
from services.stack.settings import SandboxConfig


def _record(tmp_path, events, traffic_started=1000.0):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "running", "traffic_started": traffic_started}))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return RunRecord(run, tmp_path / "keys")


def test_the_baseline_runs_from_the_warm_up_s_end_to_the_moment_its_thresholds_were_set(tmp_path):
    run = _record(tmp_path, [{"kind": "traffic started", "at_s": 0.0},
                              {"kind": "thresholds set from the baseline", "at_s": 154.6},
                              {"kind": "page", "at_s": 192.3, "alert": "TimeToFirstTokenHigh"}])
    assert shed_limit.baseline_window(run) == (1030.0, 1154.6)


def test_a_drill_whose_baseline_is_not_read_yet_has_no_window(tmp_path):
    assert shed_limit.baseline_window(_record(tmp_path, [{"kind": "traffic started", "at_s": 0.0}])) is None
    assert shed_limit.baseline_window(RunRecord(tmp_path / "nowhere", tmp_path / "keys")) is None


def test_without_a_drill_the_limit_is_the_replicas_batch_slots(tmp_path):
    cfg = SandboxConfig(home=tmp_path / "home")
    limit, basis = shed_limit.default_limit(cfg, state=None, batch_slots=64)
    assert (limit, basis) == (64, "the replicas' batch slots (64): no drill baseline to read")


def test_the_peak_counts_running_and_waiting_over_both_replicas_inside_the_window_only(promtool, tmp_path):
    # a: 3 running for 100 s, then 5 for 20 s (with 2 waiting); b: 2 running; then a surge of 60 after 150 s
    series = [{"series": 'vllm:num_requests_running{replica="a"}', "values": "3x99 5x20 3x29 60x50"},
              {"series": 'vllm:num_requests_waiting{replica="a"}', "values": "0x99 2x20 0x29 40x50"},
              {"series": 'vllm:num_requests_running{replica="b"}', "values": "2x199"},
              {"series": 'vllm:num_requests_waiting{replica="b"}', "values": "0x199"}]
    expr = f"max_over_time(({shed_limit.IN_FLIGHT})[120s:{shed_limit.STEP_S}s])"
    tests = [{"expr": expr, "eval_time": "150s", "exp_samples": [{"labels": "{}", "value": 9}]}]
    spec = {"evaluation_interval": "1s",
            "tests": [{"name": "peak", "interval": "1s", "input_series": series, "promql_expr_test": tests}]}
    promtool_test(promtool, tmp_path, spec)
