"""The calibration's arithmetic and its cache: knees, thresholds, keys, corrupt files, invalidation."""
import json
from pathlib import Path

import pytest

from sandbox.calibration import cache, thresholds
from sandbox.calibration.capacity import Calibration, CalibrationError, ProfileCapacity
from sandbox.calibration.sweep import knee
from sandbox.calibration.sweep_point import SweepConfig, SweepPoint, percentile
from services.serve.metric_names import INTER_TOKEN_LATENCY, TIME_TO_FIRST_TOKEN


def point(phase, offered, rate, ttft_p50, ttft_p99, itl_p99=0.5):
    return SweepPoint(phase, offered, 10, 0, rate, ttft_p50, ttft_p99, 0.05, itl_p99, 100.0)


SINGLE = point("single", 1, 1.0, 0.1, 0.2)
CEILING = point("ceiling", 16, 5.0, 0.4, 0.8, itl_p99=0.6)


LINE = thresholds.TpotLine(idle_share=0.1, idle_s=0.03, busy_share=0.5, busy_s=0.07)


def calibration(key=None, **profiles) -> Calibration:
    caps = {"default": ProfileCapacity("default", SINGLE, CEILING, 4.0), **profiles}
    return Calibration(key or {"k": 1}, 1.0e9, 60.0, "default", 0.8, 10.0, caps,
                       (point("rate", 2.0, 2.0, 0.2, 0.5),), thresholds.derive(0.8, 0.6), tpot_line=LINE)


def test_percentiles_interpolate_between_order_statistics():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)


def test_the_knee_is_where_the_p99_crosses_the_factor_of_the_idle_median():
    # idle median 0.1 s, factor 10: the limit is 1.0 s; p99 0.5 at 2 req/s, 1.5 at 4 req/s -> halfway: 3 req/s
    points = [SINGLE, point("rate", 2.0, 2.0, 0.2, 0.5), point("rate", 4.0, 4.0, 0.5, 1.5)]
    assert knee(points, 10.0) == pytest.approx(3.0)


def test_the_busy_point_is_one_of_the_rates_the_knee_reads():
    points = [SINGLE, point("rate", 2.0, 2.0, 0.2, 0.5), point("busy", 4.0, 4.0, 0.5, 1.5),
              point("ceiling", 64, 8.0, 3.0, 9.0)]  # the ceiling is a closed loop: not a rate
    assert knee(points, 10.0) == pytest.approx(3.0)


def test_a_curve_that_never_crosses_has_its_knee_at_the_last_rate_measured():
    points = [SINGLE, point("rate", 2.0, 2.0, 0.2, 0.3), point("rate", 4.0, 4.0, 0.2, 0.6)]
    assert knee(points, 10.0) == 4.0


def test_a_curve_past_the_limit_at_its_first_rate_has_its_knee_between_idle_and_that_rate():
    # from (0 req/s, 0.1 s) to (2 req/s, 2.1 s): 1.0 s is crossed at 0.9 req/s
    assert knee([SINGLE, point("rate", 2.0, 2.0, 1.0, 2.1)], 10.0) == pytest.approx(0.9)


def test_a_knee_needs_the_idle_point_and_a_rate():
    with pytest.raises(ValueError, match="one-at-a-time point"):
        knee([point("rate", 2.0, 2.0, 0.2, 0.5)], 10.0)


def test_thresholds_are_stated_multiples_of_the_pooled_busy_p99s_as_their_buckets_read_them():
    assert thresholds.derive(1.2, 0.5) == {"sandbox:threshold:ttft_p99_seconds": 3.0,  # 2 x 1.5, 1.2's bucket top
                                           "sandbox:threshold:client_ttft_p99_seconds": 12.0,  # 4 x 3.0
                                           "sandbox:threshold:replica_itl_p99_floor_seconds": 0.5,  # a boundary
                                           "sandbox:threshold:replica_ttft_p99_floor_seconds": 3.0}


def test_a_figure_reads_up_to_the_top_of_the_bucket_that_holds_it():
    buckets = (0.01, 0.015, 0.025)
    assert thresholds.read_ceiling(0.011, buckets) == 0.015
    assert thresholds.read_ceiling(0.015, buckets) == 0.015  # a boundary is its own bucket's top (le)
    assert thresholds.read_ceiling(0.004, buckets) == 0.01
    assert thresholds.read_ceiling(0.03, buckets) == 0.03  # past the last boundary: the figure itself


def test_no_latency_bucket_between_5_ms_and_80_s_is_wider_than_one_and_a_half_times():
    for spec in (TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY):
        b = spec.buckets
        assert max(hi / lo for lo, hi in zip(b, b[1:]) if 0.005 <= lo < 80) <= 1.5, spec.name


def test_a_very_fast_stack_gets_the_floors_not_slos_below_what_buckets_resolve():
    values = thresholds.derive(0.002, 0.001)
    assert values["sandbox:threshold:ttft_p99_seconds"] == thresholds.FLOOR_S["ttft"]
    assert values["sandbox:threshold:replica_itl_p99_floor_seconds"] == thresholds.FLOOR_S["itl"]


def test_the_healthy_median_tpot_is_read_off_the_line_through_the_idle_and_busy_points():
    # slope (0.07 - 0.03) / (0.5 - 0.1) = 0.1 s per unit of load: 0.03 + 0.1 x 0.2 = 0.05 at 0.3
    assert LINE.at(0.3) == pytest.approx(0.05)
    assert LINE.at(0.7) == pytest.approx(0.09)  # past the busy point the line goes on
    assert LINE.at(0.0) == 0.03  # never below the idle median
    with pytest.raises(ValueError, match="idle share < busy share"):
        thresholds.TpotLine(0.5, 0.03, 0.5, 0.07)


def test_a_drill_gets_the_tpot_slo_of_its_own_base_load_and_the_stacks_other_thresholds():
    cal = calibration()
    at_03 = cal.thresholds_for(0.3)
    assert at_03["sandbox:threshold:tpot_p50_seconds"] == 0.09  # 1.8 x 0.05
    # the busy load: 1.8 x 0.075, the top of the bucket that holds 0.07
    assert cal.thresholds_for(None)["sandbox:threshold:tpot_p50_seconds"] == 0.135
    assert {k: v for k, v in at_03.items() if k != thresholds.TPOT_NAME} == cal.thresholds
    with pytest.raises(ValueError, match="load share must be > 0"):
        cal.thresholds_for(0.0)


def test_a_calibration_round_trips_through_json_exactly():
    cal = calibration()
    again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again.to_dict() == cal.to_dict()
    assert again.knees() == {"default": 4.0}
    assert again.tpot_line == LINE


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("profiles"),
    lambda d: d.update(knee_share="lots"),
    lambda d: d.update(knee_share=1.5),
    lambda d: d.update(reference="long-tail"),
    lambda d: d["profiles"]["default"].update(knee_rps=-1),
    lambda d: d["profiles"]["default"]["ceiling"].update(phase="rate"),
])
def test_anything_short_of_a_whole_calibration_is_refused(damage):
    d = calibration().to_dict()
    damage(d)
    with pytest.raises(CalibrationError):
        Calibration.from_dict(d)


def test_the_key_changes_with_the_serve_config_the_catalogue_the_sweep_and_the_profiles(tmp_path):
    serve = tmp_path / "serve.yaml"
    serve.write_text("num_replicas: 2\n")
    incidents = tmp_path / "incidents"
    incidents.mkdir()
    (incidents / "a.yaml").write_text("id: a\n")
    base = cache.key(serve, incidents, SweepConfig(), ["default"])
    assert cache.key(serve, incidents, SweepConfig(), ["default"]) == base
    serve.write_text("num_replicas: 3\n")
    assert cache.key(serve, incidents, SweepConfig(), ["default"])["serve"] != base["serve"]
    serve.write_text("num_replicas: 2\n")
    (incidents / "a.yaml").write_text("id: a\nrate: 2\n")
    assert cache.key(serve, incidents, SweepConfig(), ["default"])["catalogue"] != base["catalogue"]
    (incidents / "a.yaml").write_text("id: a\n")
    assert cache.key(serve, incidents, SweepConfig(rate_s=5.0), ["default"])["catalogue"] != base["catalogue"]
    assert cache.key(serve, incidents, SweepConfig(), ["default", "long-tail"]) != base
    assert base["machine"] == cache.machine() and base["machine"]["cpus"] >= 1


def test_a_new_version_label_alone_is_the_same_serve_config(tmp_path):
    serve = tmp_path / "serve.yaml"
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n")
    v1 = cache.serve_digest(serve)
    serve.write_text("applications:\n  - name: llm\n    args: {version: v7, engine: {max_num_seqs: 32}}\n")
    assert cache.serve_digest(serve) == v1
    serve.write_text("applications:\n  - name: llm\n    args: {version: v7, engine: {max_num_seqs: 16}}\n")
    assert cache.serve_digest(serve) != v1


def test_a_setting_deployed_back_to_its_default_is_the_config_that_left_it_out(tmp_path):
    serve = tmp_path / "serve.yaml"
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n")
    v1 = cache.serve_digest(serve)
    serve.write_text("applications:\n  - name: llm\n    args: {version: v3, engine: {max_num_seqs: 32, "
                     "speculative_model: null, num_speculative_tokens: 0}}\n")
    assert cache.serve_digest(serve) == v1
    serve.write_text("applications:\n  - name: llm\n    args: {version: v3, engine: {max_num_seqs: 32, "
                     "num_speculative_tokens: 2}}\n")
    assert cache.serve_digest(serve) != v1
    # a runtime knob set and then set back to null (test_reconfigure) is the knob left out
    serve.write_text("applications:\n  - name: llm\n    args: {version: v4, engine: {max_num_seqs: 32}}\n"
                     "    deployments: [{name: LLMServer, user_config: {max_num_seqs: null}}]\n")
    knobs_back = cache.serve_digest(serve)
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n"
                     "    deployments: [{name: LLMServer, user_config: {}}]\n")
    assert cache.serve_digest(serve) == knobs_back
    # and the ingress's admission limit set and lifted (test_admission) is the shipped config, whose
    # deployments name no runtime settings at all
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n"
                     "    deployments: [{name: LLMServer}, {name: OpenAIIngress}]\n")
    shipped = cache.serve_digest(serve)
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n"
                     "    deployments: [{name: LLMServer, user_config: {max_num_seqs: null}},\n"
                     "                  {name: OpenAIIngress, user_config: {max_inflight_requests: null}}]\n")
    assert cache.serve_digest(serve) == shipped
    serve.write_text("applications:\n  - name: llm\n    args: {version: v1, engine: {max_num_seqs: 32}}\n"
                     "    deployments: [{name: LLMServer}, {name: OpenAIIngress, user_config: {max_inflight_requests: 4}}]\n")
    assert cache.serve_digest(serve) != shipped


def test_a_cached_calibration_is_found_by_its_key_and_only_by_it(tmp_path):
    cal = calibration(key={"k": 1})
    cache.save(tmp_path, cal)
    found, why = cache.load(tmp_path, {"k": 1})
    assert why is None and found.to_dict() == cal.to_dict()
    missing, why = cache.load(tmp_path, {"k": 2})
    assert missing is None and why.startswith("no calibration for this machine")


@pytest.mark.parametrize("text", ["{not json", '{"key": {"k": 1}}', "[]", ""])
def test_a_corrupt_cache_file_is_reported_removed_and_never_trusted(tmp_path, text):
    path = cache.path_for(tmp_path, {"k": 1})
    path.parent.mkdir(parents=True)
    path.write_text(text)
    found, why = cache.load(tmp_path, {"k": 1})
    assert found is None and "is corrupt" in why and "measuring again" in why
    assert not path.exists()


def test_a_file_made_for_another_key_under_this_keys_name_is_not_trusted(tmp_path):
    path = cache.path_for(tmp_path, {"k": 1})
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(calibration(key={"k": 2}).to_dict()))
    found, why = cache.load(tmp_path, {"k": 1})
    assert found is None and "another key" in why and not path.exists()


def test_sweep_settings_are_validated_and_scaled():
    with pytest.raises(ValueError, match="fractions"):
        SweepConfig(fractions=(0.8, 0.4))
    with pytest.raises(ValueError, match="knee_factor"):
        SweepConfig(knee_factor=1.0)
    with pytest.raises(ValueError, match="max_stretch"):
        SweepConfig(max_stretch=0.5)
    with pytest.raises(ValueError, match="min_chunks"):
        SweepConfig(min_chunks=-1)
    with pytest.raises(ValueError, match="busy_share must be in"):
        SweepConfig(busy_share=1.0)
    with pytest.raises(ValueError, match="none the busy share"):
        SweepConfig(fractions=(0.35, 0.55))
    short = SweepConfig().scaled(0.25)
    assert (short.single_s, short.busy_s, short.ceiling_s, short.rate_s) == (1.75, 1.5, 1.75, 1.5)
    assert short.warmup_s == 0.75
    assert SweepConfig().seconds(3) == 7.0 + 3 * (6.0 + 7.0) + 2 * 6.0


def test_no_drill_runs_its_baseline_busier_than_the_load_its_slos_were_measured_at():
    from incidents.schema import load_catalogue
    from incidents.script import CEILING

    catalogue = load_catalogue(Path(__file__).resolve().parents[2] / "incidents")
    shares = {i.id: i.traffic.rate.value for i in catalogue.values() if i.traffic.rate.unit == CEILING}
    assert len(shares) == len(catalogue)  # every base rate is written in ceiling units
    assert max(shares.values()) == SweepConfig().busy_share == 0.55  # ttft-after-deploy's


def _cli(tmp_path, *args):
    import os
    import subprocess
    import sys

    env = dict(os.environ, SANDBOX_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-m", "sandbox.cli", "calibrate", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_calibrating_a_stack_that_is_not_running_is_a_clear_error(tmp_path):
    out = _cli(tmp_path)
    assert out.returncode == 2 and "a calibration measures a running stack" in out.stderr


def test_a_profile_nobody_defined_is_a_clear_error_before_anything_is_measured(tmp_path):
    out = _cli(tmp_path, "--profile", "no-such-profile")
    assert out.returncode == 2 and "unknown traffic profile(s) no-such-profile" in out.stderr


def test_a_plot_into_a_missing_directory_is_a_clear_error(tmp_path):
    out = _cli(tmp_path, "--plot", str(tmp_path / "nowhere" / "x.png"))
    assert out.returncode == 2 and "--plot: no such directory" in out.stderr


def test_a_sweep_whose_lightest_rate_is_not_light_was_disturbed():
    from sandbox.calibration.calibrator import disturbed

    quiet = [SINGLE, point("rate", 2.0, 2.0, 0.2, 0.5)]  # median 2x the idle 0.1 s
    busy = [SINGLE, point("rate", 2.0, 2.0, 0.74, 1.2), point("busy", 3.0, 3.0, 0.6, 1.5)]  # 7.4x, over busy's
    assert disturbed(quiet) is None
    assert disturbed(busy) == ("at 2.00 req/s the median TTFT was 7.4x the idle median "
                               "(a quiet stack stays within 3x, or under the median of a heavier load)")


def test_a_fast_stack_whose_light_median_is_many_idle_ones_but_rises_with_the_load_was_not_disturbed():
    from sandbox.calibration.calibrator import disturbed

    # a fast CPU: a 27.5 ms idle prefill, 103 ms at 0.35 of the ceiling, 224 ms at the busy 0.55
    fast = [point("single", 1, 4.4, 0.0275, 0.1), point("rate", 9.6, 8.7, 0.103, 0.27),
            point("busy", 15.1, 18.0, 0.224, 0.75)]
    assert disturbed(fast) is None


def test_a_closed_loops_rate_counts_the_chunks_streamed_inside_the_window():
    from sandbox.calibration.sweep import chunk_times, streamed_rate
    from sandbox.traffic.generator import RequestResult

    # two requests of 5 chunks each (first at ttft, then 1 s apart); window [2, 6]
    a = RequestResult("200", e2e_s=4.5, ttft_s=0.5, chunk_gaps_s=[1.0] * 4)  # started at 0: chunks 0.5..4.5
    b = RequestResult("200", e2e_s=4.5, ttft_s=0.5, chunk_gaps_s=[1.0] * 4)  # started at 3: chunks 3.5..7.5
    finished = [(4.5, a), (7.5, b)]
    assert chunk_times(4.5, a) == [0.5, 1.5, 2.5, 3.5, 4.5]
    # inside [2, 6]: a's 2.5, 3.5, 4.5 and b's 3.5, 4.5, 5.5 -> 6 chunks / 4 s / 5 chunks per request
    assert streamed_rate(finished, 2.0, 6.0) == pytest.approx(0.3)
    assert streamed_rate([], 2.0, 6.0) is None
    # the requests asked for 10 tokens each (a and b streamed 5 chunks of 2 tokens): 5 chunks a request,
    # however short the ones that happened to finish were
    a.completion_tokens = b.completion_tokens = 10
    assert streamed_rate(finished, 2.0, 6.0, asked=[10, 10, 10]) == pytest.approx(0.3)
    # two finished 10-token requests, but the window's clients asked 30 on average: a third of the rate
    assert streamed_rate(finished, 2.0, 6.0, asked=[10, 50, 30]) == pytest.approx(0.1)


def test_a_drill_after_a_new_calibration_waits_out_the_alerts_latency_windows():
    from services.stack.alerts import longest_window_s

    assert longest_window_s() == 120.0  # a replica's TTFT p99 reads 2m of its histogram, the other alerts 1m
