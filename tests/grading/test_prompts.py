"""The interactive diagnosis: prompts offer the taxonomy as choices and check each query as it is typed."""
from rich.prompt import Confirm, Prompt

from sandbox.commands import submit
from sandbox.grading.diagnosis import parse_diagnosis


def test_prompts_build_a_valid_diagnosis_and_reject_a_query_that_does_not_parse(monkeypatch):
    answers = iter([
        "prefix-caching-disabled",           # root cause
        "", "v2", "kv-cache",                # location: replica (none), version, component
        "sum(rate(vllm:prefix_cache_hits_total[1m])",   # a query that does not parse: asked again
        "sum(rate(vllm:prefix_cache_hits_total[1m]))",  # evidence query
        "hit rate fell to zero after v2",    # what it shows
        "",                                  # no more evidence
        "prompt-length-shift",               # alternative
        "histogram_quantile(0.9, sum by (le) (rate(vllm:request_prompt_tokens_bucket[1m])))",
        "rollback-deploy",                   # remediation
        "v2 turned prefix caching off",      # summary
    ])
    seen = []

    def ask(label, choices=None, **kw):
        value = next(answers)
        seen.append((label, choices))
        assert choices is None or value in choices
        return value

    confirms = iter([True, False])
    monkeypatch.setattr(Prompt, "ask", staticmethod(ask))
    monkeypatch.setattr(Confirm, "ask", staticmethod(lambda *a, **k: next(confirms)))
    d = submit.prompt_diagnosis("20261130-000000-ttft-after-deploy")
    parsed = parse_diagnosis(__import__("yaml").safe_dump(d))
    assert parsed.root_cause == "prefix-caching-disabled" and parsed.location.replica is None
    assert len(parsed.evidence) == 1 and parsed.hypotheses[0].root_cause == "prompt-length-shift"
    assert seen[0][1] and "no-fault" in seen[0][1]  # the taxonomy is offered as the choices
    assert "kv-cache" in next(choices for label, choices in seen if label == "location: component")
    assert sum(1 for label, _ in seen if label.startswith("evidence query")) == 3  # asked again after the bad one
