"""Interview evidence: every piece parses, names no cause, and draws a sparkline of its shape."""
import math

from incidents import taxonomy
from incidents.promql import check_many
from sandbox.grading.evidence import CATALOGUE, piece, sparkline
from sandbox.grading.grader import _same_place


def test_every_evidence_query_parses():
    exprs = [q for p in CATALOGUE for _, q in p.queries]
    assert [e for e, err in zip(exprs, check_many(exprs)) if err] == []


def test_no_piece_of_evidence_names_a_root_cause():
    causes = {t.id for t in taxonomy.ROOT_CAUSES} | {t.id.replace("-", " ") for t in taxonomy.ROOT_CAUSES}
    for p in CATALOGUE:
        text = f"{p.name} {p.title}".lower()
        assert not [c for c in causes if c in text], p.name


def test_an_unknown_piece_is_refused_with_the_closest_name():
    try:
        piece("ttft-splt")
    except ValueError as e:
        assert "'ttft-split'" in str(e)
    else:
        raise AssertionError("accepted an unknown piece")


def test_latency_decomposition_is_marked_on_the_pieces_that_split_it():
    assert {p.name for p in CATALOGUE if p.decomposes_latency} == {"ttft-split", "latency-by-replica",
                                                                   "latency-by-version", "queue-by-replica"}


def test_a_sparkline_follows_the_shape_and_skips_gaps():
    line = sparkline([0, 1, 2, 3, 4, 5, 6, 7])
    assert line[0] == "▁" and line[-1] == "█" and len(line) == 8
    assert sparkline([1.0, math.nan, 1.0]) == "▁ ▁"
    assert len(sparkline(list(range(100)), width=20)) == 20
    assert sparkline([]) == ""


def test_locations_match_as_an_engineer_would_write_them():
    assert _same_place("component", "KV cache", "kv-cache")
    assert _same_place("component", "the attention kernel", "attention-kernel")
    assert not _same_place("component", "scheduler", "kv-cache")
    assert _same_place("version", "V2", "v2") and not _same_place("version", "v3", "v2")
    assert not _same_place("replica", None, "abc")
