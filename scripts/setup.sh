#!/usr/bin/env bash
# Create .venv and install the project with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
    echo "==> installing the project (torch==2.13.0 CPU wheel, triton, transformers, ...)"
    .venv/bin/python -m pip install -q --upgrade pip
    # torch first and pinned, so no other requirement can pull a CUDA build.
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[test]"
    # Hugging Face's `kernels` (a dependency of transformers >= 5.25, left behind by an older install) is
    # imported by transformers when present, and this repo's own `kernels` package is found in its place
    if .venv/bin/python -m pip show -q kernels >/dev/null 2>&1; then
        .venv/bin/python -m pip uninstall -q -y kernels
    fi
    rm -f .venv/.installed-*
    touch "$stamp"
fi

# Debian packages whose services must not start: invoke-rc.d reads a policy-rc.d exit 101 as "do not
# start services" during the install. A failed install warns (its message: $1) rather than stops.
apt_install_stopped() {
    local warning=$1; shift
    local made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } \
        || echo "!! $warning" >&2
    if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
}

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

# The Prometheus server the serving stack starts (Debian's package; PROMETHEUS_BIN overrides).
# The sandbox runs its own instance on its own port and data directory, so the
# package's service must not be left running.
if ! command -v "${PROMETHEUS_BIN:-prometheus}" >/dev/null 2>&1; then
    if can_apt; then
        echo "==> installing Prometheus (Debian package 'prometheus', its service kept stopped)"
        apt_install_stopped "could not install prometheus; the serving stack will not start" prometheus
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
            systemctl stop prometheus && systemctl disable prometheus
        elif [ -x /etc/init.d/prometheus ]; then
            /etc/init.d/prometheus stop >/dev/null 2>&1 || true
        fi
    else
        echo "!! Prometheus not found. As root: apt-get install prometheus (then stop its service)," >&2
        echo "!! or set PROMETHEUS_BIN to a Prometheus server binary. The serving stack and its tests need it." >&2
    fi
fi

# Docker for the containerized deployment's tests (Debian's docker.io: dockerd, containerd, runc;
# docker-compose to validate compose.yaml). The tests start their own dockerd (host networking only)
# and stop it; the package's service is kept stopped like Prometheus's.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
    if can_apt; then
        echo "==> installing Docker (Debian packages docker.io and docker-compose, services kept stopped)"
        apt_install_stopped "could not install docker.io; the container tests will be skipped" docker.io docker-compose
    else
        echo "!! dockerd not found: the container tests will be skipped (as root: apt-get install docker.io docker-compose)" >&2
    fi
fi
