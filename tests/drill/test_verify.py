"""How `sandbox verify` reads a signal: its direction against the baseline's noise, from range queries."""
from sandbox.drill import verify


class SeriesProm:
    """query_range over a function of time (the real Prometheus API shape)."""

    def __init__(self, fn):
        self.fn = fn

    def query_range(self, expr, start, end, step_s):
        t, values = start, []
        while t <= end:
            v = self.fn(t)
            if v is not None:
                values.append([t, str(v)])
            t += step_s
        return [{"metric": {}, "values": values}] if values else []


def test_a_step_up_beyond_noise_reads_up_and_a_wobble_reads_flat():
    up = verify.observe(SeriesProm(lambda t: 1.0 if t < 100 else 2.0), "x", "q", 0, 100, 200)
    assert up.direction == "up" and up.baseline == 1.0 and up.incident == 2.0
    wobble = verify.observe(SeriesProm(lambda t: 1.0 + 0.05 * ((t // 2) % 2)), "x", "q", 0, 100, 200)
    assert wobble.direction == "flat"


def test_a_drop_to_zero_reads_down_and_missing_data_says_so():
    down = verify.observe(SeriesProm(lambda t: 0.9 if t < 100 else 0.0), "x", "q", 0, 100, 200)
    assert down.direction == "down"
    none = verify.observe(SeriesProm(lambda t: None), "x", "q", 0, 100, 200)
    assert none.direction == "no data"


def test_the_warm_up_and_the_settling_time_are_left_out():
    # A spike in the first 30 s (caches filling) and right after the injection (rate windows) is not the signal.
    fn = lambda t: 50.0 if t < verify.WARMUP_S or 100 <= t < 100 + verify.SETTLE_S else 1.0  # noqa: E731
    assert verify.observe(SeriesProm(fn), "x", "q", 0, 100, 200).direction == "flat"


def test_a_noisy_baseline_needs_a_bigger_change():
    noisy = lambda t: (1.0 if (t // 2) % 2 else 2.0) if t < 100 else 1.9  # noqa: E731
    assert verify.observe(SeriesProm(noisy), "x", "q", 0, 100, 200).direction == "flat"


def test_a_signal_over_a_minute_window_is_read_once_the_window_has_cleared_the_transition():
    assert verify.settle_after("rate(x[30s])") == verify.SETTLE_S
    assert verify.settle_after("histogram_quantile(0.99, rate(x_bucket[1m]))") == 60
    assert verify.settle_after("min_over_time(max(x)[2m:2s])") == 120
    # a transition that lingers for the 1m window after the injection completed is not the new regime
    fn = lambda t: 50.0 if 100 <= t < 160 else 1.0  # noqa: E731
    assert verify.observe(SeriesProm(fn), "x", "rate(x[1m])", 0, 100, 260).direction == "flat"
    assert verify.observe(SeriesProm(fn), "x", "rate(x[30s])", 0, 100, 260).direction == "up"
