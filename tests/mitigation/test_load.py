"""The invariant of a traffic cause: the offered load still exceeds the fleet while requests wait or are refused."""


from sandbox.mitigation import load
from tests.promql_series import counter, promtool_test


class InstantProm:
    """Instant queries answered per expression; an expression not named has no data."""

    def __init__(self, values: dict[str, float]):
        self.values = values

    def query(self, expr, at=None):
        return [{"metric": {}, "value": [at or 0, str(self.values[expr])]}] if expr in self.values else []


def reading(waiting=0.0, shed=0.0, total=100.0):
    return load.excess_load(InstantProm({load.WAITING: waiting, load.SHED: shed, load.ALL: total}))


def test_requests_waiting_for_a_batch_slot_keep_the_cause_in_place():
    assert reading(waiting=31.5) == "requests wait for a batch slot (31.5 on average over the last 30 s)"


def test_a_shed_load_that_refuses_the_excess_leaves_the_cause_in_place():
    assert reading(waiting=0.0, shed=40, total=100) == ("40% of the clients' requests are refused at the ingress "
                                                        "(the last 30 s)")


def test_a_fleet_that_keeps_up_with_its_load_has_the_cause_gone():
    assert reading(waiting=0.4, shed=1, total=100) is None


def test_no_traffic_and_no_engine_series_read_as_nothing_waiting_and_nothing_refused():
    assert load.excess_load(InstantProm({})) is None


def test_the_expressions_read_the_engines_queue_and_the_clients_refused_share_in_prometheus(promtool, tmp_path):
    # two replicas, 20 and 12 waiting; the clients send 10 req/s, 3 of them refused with a 429
    series = [{"series": 'vllm:num_requests_waiting{replica="a"}', "values": "20x120"},
              {"series": 'vllm:num_requests_waiting{replica="b"}', "values": "12x120"},
              {"series": 'sandbox_traffic_requests_total{profile="default",status="200"}', "values": counter(7, 120)},
              {"series": 'sandbox_traffic_requests_total{profile="default",status="429"}', "values": counter(3, 120)}]
    tests = [{"expr": expr, "eval_time": "100s", "exp_samples": [{"labels": "{}", "value": value}]}
             for expr, value in ((load.WAITING, 32), (load.SHED, 90), (load.ALL, 300))]
    spec = {"evaluation_interval": "1s",
            "tests": [{"name": "load", "interval": "1s", "input_series": series, "promql_expr_test": tests}]}
    promtool_test(promtool, tmp_path, spec)
