# The project image: the engine, the Ray Serve app and the `sandbox` CLI (compose.yaml's ray-head,
# ray-worker and sandbox services). Prometheus, Grafana and cAdvisor run from their own public images.
#
#   docker compose build                                   (what `docker compose up` does the first time)
#   docker build -t inference-incident-sandbox:latest .
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 -t inference-incident-sandbox:gpu .
#
# Where no registry is reachable, scripts/compose_offline.sh builds it FROM a Debian base of its own (BASE) with
# pip reading a wheelhouse on loopback (PIP_SOURCE): docker/compose.offline.yaml.
ARG BASE=python:3.11-slim
FROM ${BASE}

# torch from PyTorch's own index: the CPU wheel by default (no CUDA libraries, about a tenth of the size);
# the gpu profile builds with a CUDA index instead.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Where pip looks: empty for PyPI (and TORCH_INDEX_URL for torch); an offline build passes
# "--no-index --find-links http://127.0.0.1:PORT/", which replaces both.
ARG PIP_SOURCE=

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    PATH=/opt/venv/bin:$PATH

# First and alone: the largest layer, reused while the project's code changes. In a virtual environment: a
# Debian base's Python refuses installs into itself (PEP 668); the slim image's works either way.
RUN python3 -m venv /opt/venv && pip install "torch==2.13.0" ${PIP_SOURCE:---index-url "${TORCH_INDEX_URL}"}

WORKDIR /opt/sandbox
COPY . .
# Editable, as in a checkout: Ray's workers import `services` from /opt/sandbox, and the Serve config,
# incident catalogue, rules and shipped weights are read from the tree.
RUN pip install ${PIP_SOURCE} -e . && python -c "import torch, ray, services.engine, sandbox.cli"

CMD ["sandbox", "--help"]
