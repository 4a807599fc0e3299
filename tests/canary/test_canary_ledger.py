"""Consistency bookkeeping: the first alone answer is the reference; later answers match or not."""
import pytest

from sandbox.canary.ledger import ReferenceBook


def test_the_first_alone_answer_becomes_the_reference():
    book = ReferenceBook()
    assert book.compare("k", "abc", "alone") is None
    assert book.reference("k") == "abc" and "k" in book and len(book) == 1


def test_later_answers_match_or_mismatch_alone_or_in_a_burst():
    book = ReferenceBook()
    book.compare("k", "abc", "alone")
    assert [book.compare("k", t, load) for t, load in [("abc", "alone"), ("abd", "alone"), ("abc", "burst"),
                                                       ("xyz", "burst")]] == ["match", "mismatch", "match",
                                                                              "mismatch"]


def test_a_burst_answer_never_becomes_the_reference():
    book = ReferenceBook()
    assert book.compare("k", "from a batch", "burst") is None
    assert "k" not in book
    assert book.compare("k", "alone", "alone") is None
    assert book.compare("k", "from a batch", "burst") == "mismatch"


def test_the_reference_is_never_replaced_so_a_change_keeps_showing():
    book = ReferenceBook()
    book.compare("k", "before", "alone")
    assert [book.compare("k", "after", "alone") for _ in range(3)] == ["mismatch"] * 3
    assert book.reference("k") == "before"
    assert book.compare("k", "before", "alone") == "match"


def test_keys_are_independent():
    book = ReferenceBook()
    book.compare("a/greedy", "x", "alone")
    book.compare("a/seeded", "y", "alone")
    assert book.compare("a/greedy", "y", "alone") == "mismatch"
    assert book.compare("a/seeded", "y", "alone") == "match"


def test_an_unknown_load_is_refused():
    with pytest.raises(ValueError, match="load must be one of"):
        ReferenceBook().compare("k", "x", "batch")


def test_a_new_version_gets_its_own_reference_from_its_first_alone_answer():
    book = ReferenceBook()
    book.compare("k", "old answer", "alone", version="v1")
    assert book.compare("k", "new answer", "burst", version="v2") is None  # nothing to compare with yet
    assert book.compare("k", "new answer", "alone", version="v2") is None
    assert book.reference("k", version="v2") == "new answer"
    assert book.compare("k", "new answer", "burst", version="v2") == "match"
    assert book.compare("k", "new answer", "alone", version="v1") == "mismatch"
