"""The taxonomy: the brief's exact ids, each described, and close-match suggestions for typos."""
from __future__ import annotations

import pytest

from incidents.taxonomy import (
    REMEDIATIONS,
    ROOT_CAUSES,
    as_dict,
    remediation,
    root_cause,
)

BRIEF_ROOT_CAUSES = [
    "prefix-caching-disabled", "prefill-budget-too-small", "slow-attention-kernel", "prompt-length-shift",
    "memory-headroom-too-small", "kv-block-leak", "max-num-seqs-too-high", "batch-variant-numerics",
    "sampler-seed-ignored", "replica-numerics-mismatch", "cpu-throttled-replica", "kernel-fallback",
    "kv-cache-too-small", "weight-quantization-too-coarse", "kv-cache-quantization", "draft-model-mismatch",
    "capacity-exceeded", "no-fault"]
# causes added since the brief, after its list so its ids keep their places
ADDED_ROOT_CAUSES = ["speculation-too-deep", "stop-token-misconfigured", "thread-oversubscription",
                     "cpu-limit-too-low", "max-num-seqs-too-low"]
BRIEF_REMEDIATIONS = [
    "rollback-deploy", "enable-prefix-caching", "raise-prefill-budget", "lower-memory-utilization",
    "lower-max-num-seqs", "restart-replica", "drain-replica", "enable-batch-invariance", "honor-seed",
    "requantize-finer", "raise-kv-cache", "scale-out", "no-action"]
ADDED_REMEDIATIONS = ["raise-cpu-limit", "shed-load"]


def test_ids_are_exactly_the_briefs_in_order_then_the_added_causes():
    assert [t.id for t in ROOT_CAUSES] == BRIEF_ROOT_CAUSES + ADDED_ROOT_CAUSES
    assert [t.id for t in REMEDIATIONS] == BRIEF_REMEDIATIONS + ADDED_REMEDIATIONS


def test_every_term_has_a_one_line_description():
    for term in ROOT_CAUSES + REMEDIATIONS:
        assert term.description.strip() and "\n" not in term.description


def test_lookup_returns_the_term():
    assert root_cause("kv-block-leak").id == "kv-block-leak"
    assert remediation("scale-out").description == "Add replicas."


@pytest.mark.parametrize(("lookup", "word", "message"), [
    (root_cause, "prefix-cache-off", "unknown root cause 'prefix-cache-off' (did you mean 'prefix-caching-disabled'?)"),
    (root_cause, "kv-leak", "unknown root cause 'kv-leak' (did you mean 'kv-block-leak'?)"),
    (remediation, "scale-up", "unknown remediation 'scale-up' (did you mean 'scale-out'?)"),
    (remediation, "xyz", "unknown remediation 'xyz'"),
])
def test_unknown_id_raises_with_a_close_match(lookup, word, message):
    with pytest.raises(ValueError) as info:
        lookup(word)
    assert str(info.value) == message


def test_as_dict_is_plain_data_for_json():
    data = as_dict()
    assert data["root_causes"][0] == {"id": "prefix-caching-disabled", "description": ROOT_CAUSES[0].description}
    assert len(data["remediations"]) == len(BRIEF_REMEDIATIONS + ADDED_REMEDIATIONS)
