#!/usr/bin/env bash
# The compose deployment where no image registry is reachable (this project's machines reach PyPI and Debian
# only): the images compose.yaml needs, made from those two, and the environment that runs it.
#
#   scripts/compose_offline.sh build   a Docker engine, the Debian base, the wheelhouse, the images (once: 10 min)
#   scripts/compose_offline.sh env     the exports for `sandbox up|drill|down --backend compose` (eval "$(...)")
#   scripts/compose_offline.sh stop    stops the wheelhouse server and the engine this script started
#
# 1. A Docker engine: the one at DOCKER_HOST if it answers, else our own (`dockerd --bridge=none
#    --iptables=false`: host networking only, traffic stays on loopback) on unix:///tmp/dockerd/docker.sock,
#    its images kept under /var/tmp/sandbox-dockerd between runs.
# 2. sandbox-base:bookworm: `debootstrap --variant=minbase bookworm` with Debian's Python 3.11, venv, Prometheus
#    and wget, imported with `docker import` (made once; `--rebuild-base` makes it again).
# 3. A wheelhouse: `pip download` of the project's dependencies by the host's pip (its index, its CA and the
#    CPU torch wheel on this disk), served on 127.0.0.1:8765 for the build (docker/compose.offline.yaml).
# 4. The project image, built by compose with docker/compose.offline.yaml merged over compose.yaml.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$REPO/.venv/bin/python}
WORK=${SANDBOX_OFFLINE_DIR:-/var/tmp/sandbox-offline}
ENGINE_DIR=/tmp/dockerd
SOCK=unix://$ENGINE_DIR/docker.sock
PORT=${SANDBOX_WHEELHOUSE_PORT:-8765}
BASE_IMAGE=sandbox-base:bookworm
OVERRIDE=$REPO/docker/compose.offline.yaml

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'compose_offline: %s\n' "$*" >&2; exit 2; }

engine_answers() { DOCKER_HOST=$1 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

engine() {
    if [[ -n "${DOCKER_HOST:-}" ]] && engine_answers "$DOCKER_HOST"; then echo "$DOCKER_HOST"; return; fi
    if engine_answers "$SOCK"; then echo "$SOCK"; return; fi
    command -v dockerd >/dev/null || die "dockerd is not installed (scripts/setup.sh installs Debian's docker.io)"
    [[ $(id -u) == 0 ]] || die "no Docker engine answers and starting one needs root"
    mkdir -p "$ENGINE_DIR" /var/tmp/sandbox-dockerd
    say "starting dockerd (--bridge=none --iptables=false) on $SOCK"
    setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false --data-root=/var/tmp/sandbox-dockerd \
        --exec-root="$ENGINE_DIR/exec" -H "$SOCK" --pidfile="$ENGINE_DIR/dockerd.pid" \
        >"$ENGINE_DIR/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do engine_answers "$SOCK" && { echo "$SOCK"; return; }; sleep 0.5; done
    die "dockerd did not answer on $SOCK within 30 s: $(tail -c 600 "$ENGINE_DIR/dockerd.log")"
}

base_image() {
    local host=$1
    if [[ "${REBUILD_BASE:-0}" != 1 ]] && DOCKER_HOST=$host docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        say "$BASE_IMAGE is there"; return
    fi
    command -v debootstrap >/dev/null || { say "installing debootstrap"; apt-get install -y -qq debootstrap >/dev/null; }
    local root=$WORK/rootfs
    rm -rf "$root"; mkdir -p "$root"
    say "debootstrap bookworm (python3, python3-venv, prometheus, wget) into $root"
    debootstrap --variant=minbase --include=python3,python3-venv,prometheus,wget,ca-certificates \
        bookworm "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
        || die "debootstrap failed: $(tail -c 800 "$WORK/debootstrap.log")"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    say "docker import -> $BASE_IMAGE"
    tar -C "$root" -c . | DOCKER_HOST=$host docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE_IMAGE" >/dev/null
    rm -rf "$root"
}

wheelhouse() {
    local dir=$WORK/wheelhouse
    mkdir -p "$dir"
    say "pip download: the project's dependencies into $dir"
    "$PY" - "$REPO/pyproject.toml" >"$WORK/requirements.txt" <<'EOF'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
print("setuptools>=68\nwheel\npip")
EOF
    # (pip warns of every configured local index that lacks a package: noise, filtered)
    "$PY" -m pip download -q -d "$dir" -r "$WORK/requirements.txt" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) \
        || die "pip download failed"
    ls "$dir" | grep -q '^torch-2\.13\.0+cpu' || die "the wheelhouse has no CPU torch wheel: $(ls "$dir" | grep '^torch-')"
}

serve_wheelhouse() {
    if curl -fsS "http://127.0.0.1:$PORT/" >/dev/null 2>&1; then return; fi
    say "serving the wheelhouse on 127.0.0.1:$PORT"
    setsid nohup "$PY" -m http.server "$PORT" --bind 127.0.0.1 --directory "$WORK/wheelhouse" \
        >"$WORK/wheelhouse.log" 2>&1 </dev/null &
    echo $! >"$WORK/wheelhouse.pid"
    for _ in $(seq 40); do curl -fsS "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && return; sleep 0.25; done
    die "the wheelhouse server did not answer on 127.0.0.1:$PORT"
}

exports() {
    local host=$1
    echo "export DOCKER_HOST=$host"
    echo "export SANDBOX_COMPOSE_OVERRIDE=$OVERRIDE"
    echo "export SANDBOX_WHEELHOUSE_URL=http://127.0.0.1:$PORT/"
}

case "${1:-}" in
    build)
        [[ "${2:-}" == --rebuild-base ]] && REBUILD_BASE=1
        mkdir -p "$WORK"
        host=$(engine)
        base_image "$host"
        wheelhouse
        serve_wheelhouse
        token=$(cd "$REPO" && "$PY" -m services.stack.ray_token)
        say "building the project image (docker-compose build, compose.yaml + docker/compose.offline.yaml)"
        (cd "$REPO" && DOCKER_HOST=$host SANDBOX_RAY_TOKEN_FILE=$token SANDBOX_WHEELHOUSE_URL=http://127.0.0.1:$PORT/ \
            docker-compose -f compose.yaml -f "$OVERRIDE" -p sandbox build ray-head >"$WORK/build.log" 2>&1) \
            || die "the image build failed: $(tail -c 1500 "$WORK/build.log")"
        say "built: $(DOCKER_HOST=$host docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
            | grep -E 'inference-incident-sandbox|sandbox-base' | tr '\n' ' ')"
        exports "$host"
        ;;
    env)
        host=$(engine)
        exports "$host"
        ;;
    stop)
        [[ -f "$WORK/wheelhouse.pid" ]] && kill "$(cat "$WORK/wheelhouse.pid")" 2>/dev/null || true
        rm -f "$WORK/wheelhouse.pid"
        if [[ -f "$ENGINE_DIR/dockerd.pid" ]]; then
            kill "$(cat "$ENGINE_DIR/dockerd.pid")" 2>/dev/null || true
            for _ in $(seq 40); do [[ -f "$ENGINE_DIR/dockerd.pid" ]] || break; sleep 0.5; done
        fi
        ;;
    *)
        die "usage: scripts/compose_offline.sh build [--rebuild-base] | env | stop"
        ;;
esac
