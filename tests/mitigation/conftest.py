"""The promtool binary for the tests that evaluate the mitigation expressions in Prometheus' own engine."""
import pytest

from incidents.promql import PromtoolNotFound, promtool_binary


@pytest.fixture(scope="module")
def promtool():
    try:
        return promtool_binary()
    except PromtoolNotFound as e:
        pytest.skip(str(e))
