"""What the candidate can reach on loopback cannot stop or reload the stack's Prometheus."""
import httpx
import pytest

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("path", ["/-/quit", "/-/reload"])
def test_prometheus_refuses_its_lifecycle_endpoints_and_keeps_serving(stack, path):
    resp = httpx.post(f"{stack.state.prometheus_url}{path}", timeout=10)
    assert resp.status_code == 403 and "not enabled" in resp.text.lower(), (resp.status_code, resp.text[:200])
    assert stack.prom.ready() and stack.prom.value("count(up)") >= 1
