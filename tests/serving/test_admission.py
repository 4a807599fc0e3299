"""The ingress's admission limit: counted exactly, configured in place, refused values named; and, on the
running stack, requests over it get OpenAI's 429 and the real `openai` client raises RateLimitError."""
import threading

import pytest

from services.serve.admission import AdmissionLimit, IngressSettings, shed_error
from services.serve.config import default_config_path
from services.stack.deploy_config import INGRESS, DeployConfig


def test_no_limit_admits_everything_and_a_limit_admits_that_many_at_once():
    limit = AdmissionLimit()
    assert all(limit.try_enter() for _ in range(100)) and limit.inflight == 100
    limit = AdmissionLimit()
    limit.configure(IngressSettings(max_inflight_requests=2))
    assert [limit.try_enter() for _ in range(3)] == [True, True, False]
    limit.leave()
    assert limit.try_enter() and limit.inflight == 2
    limit.configure(IngressSettings())  # lifted: the next arrival gets in
    assert limit.try_enter() and limit.inflight == 3


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_a_limit_that_is_not_a_whole_number_from_one_is_refused_by_name(value):
    with pytest.raises(ValueError, match="max_inflight_requests"):
        IngressSettings(max_inflight_requests=value)


def test_unknown_ingress_settings_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown ingress setting.*max_inflight_requests"):
        IngressSettings.from_dict({"max_inflight": 3})


def test_a_shed_request_gets_openais_429_body():
    err = shed_error()
    assert err.status == 429 and err.body()["error"]["code"] == "rate_limit_exceeded"
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


def test_the_limit_is_an_ingress_setting_deployed_in_place():
    cfg = DeployConfig.load(default_config_path())
    new = cfg.with_overrides(["ingress.max_inflight_requests=4"])
    assert new.version == cfg.version  # a runtime setting: no new version, no rolling update
    assert new.deployment(INGRESS)["user_config"] == {"max_inflight_requests": 4}
    assert new.with_overrides(["ingress.max_inflight_requests=null"]).deployment(INGRESS)["user_config"] == \
        {"max_inflight_requests": None}
    with pytest.raises(ValueError, match="max_inflight_requests"):
        cfg.with_overrides(["ingress.max_inflight_requests=0"])


@pytest.mark.stack
def test_requests_over_the_limit_get_a_429_the_openai_client_raises_as_rate_limit_error(stack):
    import openai

    from services.stack.deployer import deploy_changes

    deploy_changes(stack.cfg, stack.refresh(), ["ingress.max_inflight_requests=1"], None, 120)
    try:
        client = stack.openai(timeout=60)
        outcomes, lock = [], threading.Lock()

        def one():
            try:
                client.completions.create(model=stack.model, prompt="sort: qwertyuiopasdf -> ", max_tokens=32,
                                          temperature=0)
                kind = "ok"
            except openai.RateLimitError as e:
                assert e.status_code == 429 and e.body["code"] == "rate_limit_exceeded"
                kind = "shed"
            with lock:
                outcomes.append(kind)

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert len(outcomes) == 6 and "ok" in outcomes and "shed" in outcomes, outcomes
    finally:
        deploy_changes(stack.cfg, stack.refresh(), ["ingress.max_inflight_requests=null"], None, 120)
    # lifted: six at once all get through again
    done = []
    threads = [threading.Thread(target=lambda: done.append(stack.openai(timeout=60).completions.create(
        model=stack.model, prompt="copy: abc -> ", max_tokens=4, temperature=0))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert len(done) == 6
