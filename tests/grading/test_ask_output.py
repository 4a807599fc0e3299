"""What `sandbox ask` shows a candidate: series named by what tells them apart, figures over the points with a value."""
from __future__ import annotations

import math

from sandbox.commands.interview import series_names, series_rows

CONFIG = {"__name__": "vllm:cache_config_info", "cache_dtype": "auto", "dtype": "float32", "max_num_seqs": "16",
          "quantization": "none", "replica": "a1", "version": "v1", "enable_prefix_caching": "True"}


def test_series_are_named_by_the_labels_that_differ_between_them():
    other = {**CONFIG, "replica": "b2", "version": "v2", "enable_prefix_caching": "False"}
    assert series_names([CONFIG, other]) == ["enable_prefix_caching=True,replica=a1,version=v1",
                                             "enable_prefix_caching=False,replica=b2,version=v2"]


def test_wide_names_a_series_by_every_label_and_one_series_is_named_in_full():
    full = ("cache_dtype=auto,dtype=float32,enable_prefix_caching=True,max_num_seqs=16,quantization=none,"
            "replica=a1,version=v1")
    assert series_names([CONFIG]) == [full]
    assert series_names([CONFIG, {**CONFIG, "replica": "b2"}], wide=True)[0] == full


def test_last_min_and_max_skip_points_with_no_value():
    rows = [{"metric": {"task": "add"}, "values": [[1, "1"], [2, "NaN"], [3, "0.5"], [4, "NaN"]]}]
    row, = series_rows(rows)
    assert (row["last"], row["min"], row["max"]) == (0.5, 0.5, 1.0)
    empty, = series_rows([{"metric": {"task": "add"}, "values": [[1, "NaN"]]}])
    assert (empty["last"], empty["min"], empty["max"]) == (None, None, None)
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
