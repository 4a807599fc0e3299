"""Incident-script fixtures: write YAML text to tmp_path, load it expecting a refusal; promtool or skip."""
from __future__ import annotations

from pathlib import Path

import pytest

from incidents.promql import PromtoolNotFound, promtool_binary
from incidents.schema import IncidentError, load_incident
from tests.incidents.samples import fake_faults


@pytest.fixture
def write(tmp_path):
    def write(text: str, stem: str = "ttft-after-deploy") -> Path:
        path = tmp_path / f"{stem}.yaml"
        path.write_text(text)
        return path
    return write


@pytest.fixture
def refused(write):
    """The IncidentError a text is refused with (and the path it was written to)."""
    def refused(text: str, stem: str = "ttft-after-deploy") -> tuple[IncidentError, Path]:
        path = write(text, stem)
        with pytest.raises(IncidentError) as info:
            load_incident(path, fault_validator=fake_faults)
        return info.value, path
    return refused


@pytest.fixture
def promtool():
    try:
        return promtool_binary()
    except PromtoolNotFound as e:
        pytest.skip(str(e))
