"""Batch invariance on every code path this CPU can take, not only the one it takes by default.

The BLAS and ATen kernels under the torch path are picked at load time from the CPU and
the environment: MKL's instruction set (`MKL_ENABLE_INSTRUCTIONS`), ATen's vectorized
kernels (`ATEN_CPU_CAPABILITY`), the thread count. A CI machine is whichever one the
session got, so the invariance checks (tests/engine/invariance_probe.py: each op, and
the engine's logits alone and in a batch of 16, whole and chunked prefill, float32 and
bfloat16) run in a fresh process per combination. A combination this CPU cannot run is
skipped, saying why: ATen's AVX-512 kernels would die on an illegal instruction, and MKL
cannot take a path whose instructions the CPU lacks.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("invariance_probe.py")


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


FLAGS = cpu_flags()
# What each setting needs of the CPU (ATen's checks for its avx2 and avx512 kernels).
NEEDS = {"avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"},
         "AVX2": {"avx2"}, "AVX512": {"avx512f"}}


def missing(setting: str) -> set[str]:
    return NEEDS.get(setting, set()) - FLAGS


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("aten", ["default", "avx2", "avx512"])
@pytest.mark.parametrize("mkl", ["AVX2", "AVX512"])
def test_batch_invariant_mode_holds_on_every_instruction_set_this_cpu_has(mkl, aten, threads, record_property):
    lacking = missing(mkl) | missing(aten)
    if lacking:
        pytest.skip(f"this CPU lacks {sorted(lacking)}: MKL_ENABLE_INSTRUCTIONS={mkl}, "
                    f"ATEN_CPU_CAPABILITY={aten} is not a path it can take")
    env = dict(os.environ, MKL_ENABLE_INSTRUCTIONS=mkl, ATEN_CPU_CAPABILITY=aten, OMP_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, str(PROBE), str(threads)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    report = json.loads(lines[-1])
    banner = next((ln for ln in lines if ln.startswith("MKL_VERBOSE oneMKL")), "no MKL banner")
    record_property("mkl", banner)
    record_property("aten_capability", report["capability"])
    assert report["threads"] == threads
    assert report["capability"] == ("DEFAULT" if aten == "default" else aten.upper())
    assert report["failures"] == [], f"{banner}\n" + "\n".join(report["failures"])
