"""The leak scan's matching: ids and synonyms, whatever the separators, never inside other words."""
from sandbox.drill.leaks import LeakScan, find, terms_for


def test_an_id_matches_with_any_separator_and_case():
    terms = terms_for({"root_cause": "kv-block-leak"}, "abort-path", [])
    assert find("engine: KV_Block leak detected", terms) == ["block leak", "kv block leak"]
    assert find("the replica leaked blocks", terms) == ["leaked blocks"]
    assert find("no blockleak here", terms) == []  # never inside another word
    assert "abort path" in terms


def test_neutral_metric_names_do_not_match():
    terms = terms_for({"root_cause": "cpu-throttled-replica"}, "throttled", ["cpu-throttle"])
    names = "sandbox:replica_cpu_throttled_seconds_total\nsandbox:replica_cpu_periods_throttled_total"
    assert find(names, terms) == []
    assert find("applying cpu-throttle to replica 2", terms) == ["cpu throttle"]


def test_one_word_variant_keys_are_not_terms():
    assert "draft" not in terms_for({"root_cause": "draft-model-mismatch"}, "draft", ["deploy"])


def test_the_scan_reports_where_it_found_a_term():
    scan = LeakScan(terms_for({"root_cause": "sampler-seed-ignored"}, "seed-scope", []))
    scan.scan("api", "GET /health", '{"status": "ok"}')
    scan.scan("logs", "replica.log", "warning: request seed ignored by sampler")
    result = scan.result()
    assert not result["pass"] and result["hits"] == [{"surface": "logs", "where": "replica.log",
                                                      "term": "seed ignored"}]
    assert result["scanned"] == {"api": 1, "logs": 1}
