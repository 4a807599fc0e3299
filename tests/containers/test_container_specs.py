"""Container faults and `node: container` variants, checked before anything runs (no Docker engine needed)."""
from __future__ import annotations

from pathlib import Path

import pytest

import services.stack.container_node as container_node
from faults import InvalidFault, build
from incidents.schema import IncidentError, load_incident
from services.stack.node_pool import next_name

SLOW_REPLICA = Path(__file__).resolve().parents[2] / "incidents" / "slow-replica.yaml"


@pytest.mark.parametrize(("spec", "field"), [
    ({"type": "container-cpu-quota", "cpu_fraction": 0}, "cpu_fraction"),
    ({"type": "container-cpu-quota", "cpu_fraction": 1.5}, "cpu_fraction"),
    ({"type": "container-cpu-quota", "cpu_fraction": 0.2, "replica": "first"}, "replica"),
    ({"type": "container-pause", "seconds": 0}, "seconds"),
    ({"type": "container-pause"}, "seconds"),
    ({"type": "container-memory-limit", "limit_mb": 5}, "limit_mb"),
    ({"type": "container-memory-limit", "limit_mb": 512.5}, "limit_mb"),
    ({"type": "container-memory-limit", "limit_mb": True}, "limit_mb"),
    ({"type": "container-kill", "restart_after_s": -3}, "restart_after_s"),
    ({"type": "container-kill", "replica": -1}, "replica"),
])
def test_a_bad_container_fault_is_refused_naming_its_field(spec, field):
    with pytest.raises(InvalidFault) as info:
        build(spec)
    assert info.value.field == field and str(info.value).startswith(f"{field}: ")


def test_valid_container_faults_build_and_round_trip():
    for spec in ({"type": "container-cpu-quota", "replica": 0, "cpu_fraction": 0.15},
                 {"type": "container-pause", "replica": "random", "seconds": 30},
                 {"type": "container-memory-limit", "replica": 0, "limit_mb": 1500},
                 {"type": "container-kill", "replica": "random", "restart_after_s": 20}):
        fault = build(spec)
        assert fault.spec() == spec and fault.component == "node" and not fault.injected


def test_the_slow_replica_container_variant_asks_for_a_container_node():
    incident = load_incident(SLOW_REPLICA)
    assert incident.variants["noisy-neighbour"].node == "container"
    assert all(v.node is None for k, v in incident.variants.items() if k != "noisy-neighbour")
    throttled, noisy = incident.variants["throttled"], incident.variants["noisy-neighbour"]
    # the same diagnosis, whether the quota is on a process or a container; the cure differs: a restart leaves
    # the process's quota behind but starts the replica on the same held machine
    assert (noisy.answer.root_cause, noisy.answer.location, noisy.answer.evidence) == (
        throttled.answer.root_cause, throttled.answer.location, throttled.answer.evidence)
    assert (throttled.answer.remediation, noisy.answer.remediation) == (("drain-replica", "restart-replica"),
                                                                        ("drain-replica",))
    assert noisy.signature == throttled.signature


def _variant_text(extra: str) -> str:
    return SLOW_REPLICA.read_text() + extra


CONTAINER_FAULT = """  elsewhere:
    {node}faults:
      - {{type: container-pause, seconds: 5}}
    signature: {{itl_p99_spread: up}}
    answer:
      root_cause: cpu-throttled-replica
      remediation: [drain-replica]
      location: {{replica: null, version: null, component: node}}
      evidence: [itl_p99_spread]
"""


def test_a_container_fault_without_a_container_node_is_refused(tmp_path):
    path = tmp_path / "slow-replica.yaml"
    path.write_text(_variant_text(CONTAINER_FAULT.format(node="")))
    with pytest.raises(IncidentError, match=r"variants\.elsewhere\.faults\[0\]\.type: a container fault needs"):
        load_incident(path)


def test_an_unknown_node_kind_is_refused(tmp_path):
    path = tmp_path / "slow-replica.yaml"
    path.write_text(_variant_text(CONTAINER_FAULT.format(node="node: vm\n    ")))
    with pytest.raises(IncidentError, match=r"variants\.elsewhere\.node: unknown node 'vm'"):
        load_incident(path)


@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    monkeypatch.setattr(container_node, "_engine_problem", None)
    yield
    container_node._engine_problem = None


def test_without_an_engine_container_variants_are_skipped_by_seeded_choice_and_all(no_engine, capsys):
    from sandbox.commands.drill import _runnable_cases, _runnable_variant

    incident = load_incident(SLOW_REPLICA)
    assert "no Docker engine answers" in container_node.unrunnable(incident.variants["noisy-neighbour"])
    assert container_node.unrunnable(incident.variants["throttled"]) is None
    chosen = _runnable_variant(incident, "noisy-neighbour", seed=0)
    assert chosen in ("throttled", "small-cache", "batch-cap")  # drawn and runnable (kernel-path: by name only)
    assert _runnable_variant(incident, "noisy-neighbour", seed=0) == chosen  # the seed decides
    cases = _runnable_cases([(incident, v) for v in incident.variants])
    assert [v for _, v in cases] == ["throttled", "kernel-path", "small-cache", "batch-cap"]
    assert "skipping slow-replica / noisy-neighbour: it needs a container node" in capsys.readouterr().err


def test_without_an_engine_a_drill_of_a_container_variant_refuses_before_starting(no_engine, tmp_path):
    from sandbox.drill.runner import Drill
    from services.stack.settings import SandboxConfig

    with pytest.raises(ValueError, match="noisy-neighbour runs a replica in a container node: no Docker engine"):
        Drill(SandboxConfig(home=tmp_path), load_incident(SLOW_REPLICA), "noisy-neighbour", 0)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("taken", "name"), [
    ([], "sandbox-node-1"),
    (["sandbox-node-1"], "sandbox-node-2"),
    (["sandbox-node-2"], "sandbox-node-3"),  # numbers only go up: no name of a node Ray saw die comes back
    (["sandbox-node-1", "sandbox-node-7", "other"], "sandbox-node-8"),
])
def test_a_fresh_machine_takes_the_next_number_after_every_node_started(taken, name):
    assert next_name(taken) == name
