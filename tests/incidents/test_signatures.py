"""Signatures over quantities: derived from the incident files' signals, filled in by each cause's mechanism."""
from __future__ import annotations

from pathlib import Path

import pytest

from incidents import taxonomy
from incidents.promql import PromtoolNotFound
from incidents.readings import readings
from incidents.schema import load_catalogue
from incidents.signatures import cause_signatures, conflicts, covers, variant_signature

ROOT = Path(__file__).resolve().parents[2]
GREEDY = (("mode", "greedy"),)


@pytest.fixture(scope="module")
def catalogue():
    try:
        return load_catalogue(ROOT / "incidents")  # validates every signal through promtool
    except PromtoolNotFound as e:
        pytest.skip(str(e))


def test_no_variant_s_signals_contradict_its_cause_s_mechanism(catalogue):
    assert [c for i in catalogue.values() for v in i.variants.values() for c in conflicts(i, v)] == []


def test_every_root_cause_has_a_signature(catalogue):
    assert sorted(cause_signatures(catalogue)) == sorted(t.id for t in taxonomy.ROOT_CAUSES)


def test_one_replica_s_signature_keeps_the_best_replica_flat_and_moves_the_fleet(catalogue):
    inc = catalogue["flaky-outputs"]
    sig = variant_signature(inc, inc.variants["one-replica"])
    assert sig.at(("output-mismatch", GREEDY, "fleet")) == "up"
    assert sig.at(("output-mismatch", GREEDY, "replica-min")) == "flat"
    assert sig.at(("output-mismatch", GREEDY, "replica-spread")) == "up"
    assert sig.lookup("output-mismatch", GREEDY, "replica-min").source == "greedy_mismatch_min_replica"
    # a narrower slice (greedy repeats in bursts) is spoken for by the slice
    assert sig.at(("output-mismatch", GREEDY + (("load", "burst"),), "fleet")) == "up"


def test_a_per_replica_reading_is_read_where_the_signature_moves(catalogue):
    inc = catalogue["slow-replica"]
    sig = variant_signature(inc, inc.variants["throttled"])
    r, = readings("sum by (replica) (rate(sandbox:replica_cpu_throttled_seconds_total[1m]))")
    exp = sig.expected(r)
    assert (exp.direction, exp.reduce, exp.key[2]) == ("up", "max", "replica-max")
    turned, = readings("max by (replica) (sandbox:device_memory_used_bytes)")
    inc = catalogue["oom-at-peak"]
    exp = variant_signature(inc, inc.variants["headroom"]).expected(turned)
    assert (exp.direction, exp.reduce, exp.key[2]) == ("down", "max", "replica-min")


def test_no_fault_moves_nothing_anywhere(catalogue):
    sig = cause_signatures(catalogue)["no-fault"]
    assert sig.at(("queue-time", (), "fleet")) == "flat" and sig.at(("kv-usage", (), "replica-max")) == "flat"


def test_what_is_said_of_the_whole_does_not_speak_for_a_part():
    assert covers((), ()) and covers(GREEDY, GREEDY + (("load", "burst"),))
    assert not covers((), (("length", "long"),)) and not covers(GREEDY, ())


def test_every_component_the_catalogue_locates_is_in_the_closed_list(catalogue):
    used = {v.answer.location.component for i in catalogue.values() for v in i.variants.values()} - {None}
    assert used <= {c.id for c in taxonomy.COMPONENTS}


@pytest.mark.parametrize(("text", "id"), [("KV cache", "kv-cache"), ("the attention kernel", "attention-kernel"),
                                          ("speculative_decoding", "speculative-decoding")])
def test_a_component_is_known_in_any_case_or_spacing(text, id):
    assert taxonomy.component(text).id == id


def test_an_unknown_component_names_the_closest_and_the_list():
    with pytest.raises(ValueError, match=r"unknown component 'kv cache manager' \(did you mean 'kv-cache'\?\); "
                                         r"the components are prefix-cache, scheduler"):
        taxonomy.component("kv cache manager")
