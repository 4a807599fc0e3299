"""Fault specs: every type, its fields, and an error that names the field for every kind of mistake."""
import pytest

import faults
from faults import FAULT_TYPES, InvalidFault, build
from faults.cpu_throttle import CpuThrottle
from faults.deploys import Deploy, Knobs
from faults.pause import Pause
from faults.registry import fault_class
from faults.replica_override import ReplicaOverride


def test_the_fault_types_and_their_fields():
    assert {t: faults.fields_of(t) for t in FAULT_TYPES} == {
        "deploy": {"set": True, "version": False},
        "knobs": {"set": True},
        "replica-override": {"set": True, "replica": False},
        "cpu-throttle": {"cpu_fraction": True, "replica": False},
        "pause": {"seconds": True, "replica": False},
        "container-cpu-quota": {"cpu_fraction": True, "replica": False},
        "container-pause": {"seconds": True, "replica": False},
        "container-memory-limit": {"limit_mb": True, "replica": False},
        "container-kill": {"replica": False, "restart_after_s": False},
    }


@pytest.mark.parametrize(("spec", "cls"), [
    ({"type": "deploy", "set": {"engine.enable_prefix_caching": False}}, Deploy),
    ({"type": "deploy", "set": {"max_num_batched_tokens": 64, "default_max_tokens": 48}, "version": "v9"}, Deploy),
    ({"type": "knobs", "set": {"max_num_seqs": 4}}, Knobs),
    ({"type": "replica-override", "replica": 1, "set": {"num_gpu_blocks": 16}}, ReplicaOverride),
    ({"type": "cpu-throttle", "replica": "random", "cpu_fraction": 0.2}, CpuThrottle),
    ({"type": "pause", "replica": 0, "seconds": 5}, Pause),
])
def test_a_valid_spec_builds_its_type_and_round_trips(spec, cls):
    fault = build(spec)
    assert type(fault) is cls and not fault.injected
    assert build(fault.spec()) == fault
    assert {k: v for k, v in fault.spec().items() if k in spec} == spec


@pytest.mark.parametrize(("spec", "field", "words"), [
    ("pause", "type", "a mapping"),
    ({"seconds": 3}, "type", "unknown fault type None"),
    ({"type": "reboot"}, "type", "unknown fault type 'reboot' (types: deploy, knobs, replica-override"),
    ({"type": "pause", "seconds": 3, "duration": 5}, "duration", "unknown field for a pause fault"),
    ({"type": "pause"}, "seconds", "required for a pause fault"),
    ({"type": "pause", "seconds": 0}, "seconds", "(0.0, 3600.0]"),
    ({"type": "pause", "seconds": "5s"}, "seconds", "got '5s'"),
    ({"type": "pause", "seconds": 5, "replica": "first"}, "replica", "'random' or a replica index"),
    ({"type": "pause", "seconds": 5, "replica": -1}, "replica", "got -1"),
    ({"type": "pause", "seconds": 5, "replica": True}, "replica", "got True"),
    ({"type": "cpu-throttle", "cpu_fraction": 1.0}, "cpu_fraction", "[0.01, 1.0)"),
    ({"type": "cpu-throttle", "cpu_fraction": 0}, "cpu_fraction", "got 0"),
    ({"type": "cpu-throttle", "cpu_fraction": 0.001}, "cpu_fraction", "got 0.001"),
    ({"type": "deploy", "set": {}}, "set", "non-empty mapping"),
    ({"type": "cpu-throttle", "cpu_fraction": 0.5, "replica": "every"}, "replica",
     "'random', 'all' or a replica index"),
    ({"type": "deploy", "set": ["max_num_seqs=4"]}, "set", "non-empty mapping"),
    ({"type": "deploy", "set": {"engine.no_such_field": 1}}, "set.engine.no_such_field", "unknown setting"),
    ({"type": "deploy", "set": {"max_num_seqs": 0}}, "set.max_num_seqs", "positive integer"),
    ({"type": "deploy", "set": {"max_num_seqs": 4096}}, "set.max_num_seqs", "max_num_batched_tokens must be >="),
    ({"type": "deploy", "set": {"knobs.max_num_seqs": 4}}, "set.knobs.max_num_seqs", "use a fault of type knobs"),
    ({"type": "deploy", "set": {"version": "v3"}}, "set.version", "the fault's version field"),
    ({"type": "deploy", "set": {"max_num_seqs": 8}, "version": "not a label"}, "version", "non-empty name"),
    ({"type": "knobs", "set": {"max_num_seq": 4}}, "set.max_num_seq", "unknown knob"),
    ({"type": "knobs", "set": {"max_num_seqs": "4"}}, "set.max_num_seqs", "positive integer"),
    ({"type": "replica-override", "set": {"num_blocks": 4}}, "set.num_blocks", "not an EngineConfig field"),
    ({"type": "replica-override", "set": {"num_gpu_blocks": 0}}, "set.num_gpu_blocks", "positive integer"),
    ({"type": "replica-override", "set": {"dtype": "fp8"}}, "set.dtype", "must be one of"),
    ({"type": "replica-override", "set": {"max_num_seqs": 64, "max_num_batched_tokens": 32}}, "set",
     "max_num_batched_tokens must be >= max_num_seqs"),
])
def test_an_invalid_spec_names_its_field(spec, field, words):
    with pytest.raises(InvalidFault) as err:
        build(spec)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ") and words in str(err.value)


def test_a_fault_built_directly_is_validated_too():
    with pytest.raises(InvalidFault, match="cpu_fraction"):
        CpuThrottle(cpu_fraction=2)


def test_each_fault_type_says_what_the_rest_of_the_house_asks_of_it():
    described = {name: (cls.needs_ray, cls.node, cls.new_version, cls.public) for name, cls in FAULT_TYPES.items()}
    assert described == {
        "deploy": (False, None, True, True), "knobs": (False, None, False, False),
        "replica-override": (True, None, False, False), "cpu-throttle": (False, None, False, False),
        "pause": (False, None, False, False), "container-cpu-quota": (False, "container", False, False),
        "container-pause": (False, "container", False, False),
        "container-memory-limit": (False, "container", False, False),
        "container-kill": (False, "container", False, False)}


def test_fault_class_names_the_class_of_a_spec_or_none():
    assert fault_class({"type": "pause", "seconds": 3}) is FAULT_TYPES["pause"]
    assert fault_class({"type": "nope"}) is None and fault_class("deploy") is None
