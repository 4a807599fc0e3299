"""The project image's Dockerfile: the pinned torch CPU wheel, then the project; nothing it needs ignored.

Nothing here builds it (no registry is reachable); compose.yaml builds it for users.
"""
import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_image_starts_from_python_311_slim_and_installs_the_pinned_cpu_torch_first():
    steps = _instructions()
    assert steps[:2] == [("ARG", "BASE=python:3.11-slim"), ("FROM", "${BASE}")]  # the offline build names its own
    assert ("ARG", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu") in steps
    assert ("ARG", "PIP_SOURCE=") in steps  # empty: PyPI, and PyTorch's index for torch
    runs = [arg for op, arg in steps if op == "RUN"]
    pinned = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                  if d.startswith("torch"))
    assert re.search(rf'pip install "{re.escape(pinned)}" '
                     r'\$\{PIP_SOURCE:---index-url "\$\{TORCH_INDEX_URL\}"\}', runs[0])
    assert "pip install ${PIP_SOURCE} -e ." in runs[-1]  # the project after torch: its `torch==` pin is then met
    assert not any("prometheus" in arg for _, arg in steps)


def test_the_torch_line_reads_pytorchs_index_by_default_and_only_the_offline_source_when_given():
    # the RUN line's own expansion, by the shell a Debian or slim base runs it with
    line = next(arg for op, arg in _instructions() if op == "RUN" and "torch==" in arg)
    words = line.split("pip install ", 1)[1]
    env = {"TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu", "PATH": "/usr/bin:/bin"}
    for source, expected in (("", ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]),
                             ("--no-index --find-links http://127.0.0.1:8765/",
                              ["torch==2.13.0", "--no-index", "--find-links", "http://127.0.0.1:8765/"])):
        out = subprocess.run(["sh", "-c", f"printf '%s\\n' {words}"], env={**env, "PIP_SOURCE": source},
                             capture_output=True, text=True, check=True)
        assert out.stdout.split("\n")[:-1] == expected


def test_the_build_context_keeps_what_the_image_runs_from():
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    needed = ["pyproject.toml", "README.md", "services/serve_config.yaml", "services/model/weights/target",
              "incidents", "dashboards/rules", "sandbox/cli.py", "faults", "kernels"]
    for path in needed:
        parts = Path(path).parts
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        hits = [p for p in patterns for prefix in prefixes if fnmatch.fnmatch(prefix, p.removeprefix("**/"))]
        assert hits == [], f"{path} is excluded from the build context by {hits}"
    for leftover in (".venv", "runs", ".git", "tests"):
        assert leftover in patterns


def test_the_compose_services_build_this_dockerfile_with_the_cpu_and_gpu_wheels():
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    assert services["ray-head"]["image"] == services["sandbox"]["image"] == "inference-incident-sandbox:latest"
    assert "args" not in services["ray-head"]["build"]  # the Dockerfile's default: the CPU wheel
    assert services["ray-worker-gpu"]["image"] == "inference-incident-sandbox:gpu"
