"""Container-level faults on a real Ray worker node in a Docker container, joined to a local head.

One stack for the module (2 replicas, one of them on `sandbox-node-1`, a container with host
networking and the host's Python runtime mounted read-only). Each fault is injected for real, its
effect checked where it shows (the container's cgroup, Docker's state, Ray's node list, Prometheus),
and its revert checked to bring the baseline back. Run it under `flock /tmp/sandbox-live.lock`.
"""
from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time

import docker
import httpx
import pytest

from faults import FaultContext, build
from faults.container_target import cgroup_dir, container_replicas
from faults.replicas import list_replicas
from incidents.profiles import PROFILES
from sandbox.mitigation.actions import drain_replica
from sandbox.traffic.generator import run_traffic
from services.serve.cgroup_cpu import read_cpu_stat
from services.stack.container_node import alive_nodes, remove_image
from services.stack.progress import Steps
from services.stack.prometheus import PrometheusClient
from services.stack.settings import SandboxConfig
from services.stack.stack import Stack
from services.stack.state import StackState

PORTS = {"ray_port": 6393, "dashboard_port": 8279, "metrics_export_port": 8093, "api_port": 8013,
         "prometheus_port": 9103, "traffic_port": 9413}
NODE = "sandbox-node-1"
THROTTLED = 'sandbox:replica_cpu_throttled_seconds_total{{replica="{}"}}'
ITL = ("sum by (replica) (increase(vllm:inter_token_latency_seconds_sum[{w}s])) / "
       "sum by (replica) (increase(vllm:inter_token_latency_seconds_count[{w}s]))")


class Live:
    def __init__(self, cfg: SandboxConfig, state, prom: PrometheusClient, engine):
        self.cfg, self.state, self.prom, self.engine = cfg, state, prom, engine

    def container(self):
        return self.engine.client.containers.get(NODE)

    def traffic(self, seconds: float, seed: int) -> dict:
        stats = asyncio.run(run_traffic(self.state.api_url, self.state.model_name, PROFILES["short"], rate=3.0,
                                        duration_s=seconds, seed=seed))
        return stats.summary()

    def value(self, promql: str) -> float:
        return self.prom.value(promql) or 0.0

    def wait(self, what: str, check, timeout_s: float = 60.0, every_s: float = 0.5):
        deadline = time.monotonic() + timeout_s
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout_s:.0f}s")
            time.sleep(every_s)

    def node_ids(self) -> dict[str, str]:
        return {n["node_name"]: n["node_id"] for n in alive_nodes(self.state.dashboard_url, self.state.ray_token_file)
                if not n.get("is_head_node")}

    def serving_both(self, ctx) -> bool:
        """Both replicas RUNNING again, one of them on the container node."""
        return len(list_replicas(ctx)) == 2 and len(container_replicas(ctx)) == 1

    def metrics_port(self) -> int:
        cmd = self.container().attrs["Config"]["Cmd"]
        return int(next(a for a in cmd if a.startswith("--metrics-export-port=")).partition("=")[2])


@pytest.fixture(scope="module")
def live(engine, tmp_path_factory):
    cfg = SandboxConfig(home=tmp_path_factory.mktemp("sandbox-home"), **PORTS)
    stack = Stack(cfg)
    t0 = time.perf_counter()
    state = stack.up(replicas=2, container_nodes=1)
    print(json.dumps({"stack_up_s": round(time.perf_counter() - t0, 1)}))
    prom = PrometheusClient(state.prometheus_url)
    try:
        yield Live(cfg, state, prom, engine)
    finally:
        prom.close()
        stack.down()
        if not engine.image_before:
            remove_image(engine.client)


@pytest.fixture(scope="module")
def ctx(live):
    with FaultContext(live.cfg, live.state, random.Random(3), log=print, timeout_s=150) as ctx:
        yield ctx


def test_a_container_node_joins_the_head_and_holds_exactly_one_replica(live, ctx):
    assert live.state.container_nodes == [NODE]
    assert live.container().status == "running"
    assert live.container().attrs["HostConfig"]["NetworkMode"] == "host"
    assert set(live.node_ids()) == {NODE}
    found = container_replicas(ctx)
    assert len(found) == 1 and found[0][1] == NODE
    replica = found[0][0]
    # The replica's metrics come from inside the container, through the node's own metrics agent.
    assert live.value(f'count(vllm:cache_config_info{{replica="{replica.replica_id}"}})') == 1


def test_a_cpu_quota_throttles_the_container_and_its_replica_exports_it_until_revert(live, ctx):
    container = live.container()
    group = cgroup_dir(container, "cpu")
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "-1"
    before = read_cpu_stat(group)
    fault = build({"type": "container-cpu-quota", "replica": "random", "cpu_fraction": 0.15})
    try:
        where = fault.inject(ctx)
        target = where.replica
        other = next(r.replica_id for r in list_replicas(ctx) if r.replica_id != target)
        assert where.component == "node"
        assert (group / "cpu.cfs_quota_us").read_text().strip() == "15000"
        traffic_began = time.monotonic()
        summary = live.traffic(15, seed=5)
        assert summary["statuses"] == {"200": summary["sent"]}
        stat = read_cpu_stat(group)
        assert stat.throttled_periods - before.throttled_periods > 10, (before, stat)
        assert stat.throttled_seconds - before.throttled_seconds > 0.5, (before, stat)
        live.wait("the replica's exported throttling", lambda: live.value(THROTTLED.format(target)) > 0.5, 20)
        # The whole traffic's window, however long the wait: a 15 s window read after the wait had slid past
        # the throttled replica's last samples (its series was missing: a KeyError in CI).
        w = math.ceil(time.monotonic() - traffic_began) + 5
        itl = {r["metric"]["replica"]: float(r["value"][1]) for r in live.prom.query(ITL.format(w=w))}
        print(json.dumps({"cpu_fraction": 0.15, "cpu_stat": vars(stat), "mean_itl_s": {
            "in the container": itl[target], "on the head": itl[other]}}))
        assert itl[target] > 1.5 * itl[other]
    finally:
        fault.revert(ctx)
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "-1"
    settled = read_cpu_stat(group)
    live.traffic(4, seed=6)
    assert read_cpu_stat(group).throttled_periods == settled.throttled_periods


def test_a_paused_container_stops_answering_and_answers_again_after_revert(live, ctx):
    url = f"http://127.0.0.1:{live.metrics_port()}/metrics"
    assert httpx.get(url, timeout=5).status_code == 200
    node_before = live.node_ids()[NODE]
    fault = build({"type": "container-pause", "replica": 0, "seconds": 120})
    try:
        fault.inject(ctx)
        assert live.container().status == "paused"
        with pytest.raises(httpx.TimeoutException):
            httpx.get(url, timeout=2)
    finally:
        fault.revert(ctx)
    assert live.container().status == "running"
    assert httpx.get(url, timeout=5).status_code == 200
    assert live.node_ids()[NODE] == node_before  # a short pause: the same node carries on
    assert live.serving_both(ctx)


def test_a_paused_container_unpauses_by_itself_after_its_seconds(live, ctx):
    fault = build({"type": "container-pause", "replica": 0, "seconds": 2})
    try:
        fault.inject(ctx)
        assert live.container().status == "paused"
        live.wait("unpaused by the timer", lambda: live.container().status == "running", 10, 0.2)
    finally:
        fault.revert(ctx)


def test_a_killed_node_leaves_the_cluster_and_rejoins_on_revert(live, ctx):
    node_before = live.node_ids()[NODE]
    fault = build({"type": "container-kill", "replica": "random"})
    try:
        fault.inject(ctx)
        assert live.container().status == "exited"
        live.wait("the head marks the node dead", lambda: NODE not in live.node_ids(), 90)
    finally:
        fault.revert(ctx)
    assert live.container().status == "running"
    assert live.node_ids()[NODE] != node_before  # a new Ray node in the same container
    live.wait("Serve places the replica on the node again", lambda: live.serving_both(ctx), 240, 2)


def test_a_memory_limit_oom_kills_what_grows_past_it_and_revert_lifts_it(live, ctx):
    container = live.container()
    group = cgroup_dir(container, "memory")
    unlimited = (group / "memory.limit_in_bytes").read_text().strip()
    assert int(unlimited) > 1 << 50
    used_mb = int((group / "memory.usage_in_bytes").read_text()) >> 20
    fault = build({"type": "container-memory-limit", "replica": "random", "limit_mb": used_mb + 200})
    try:
        fault.inject(ctx)
        assert int((group / "memory.limit_in_bytes").read_text()) == (used_mb + 200) << 20
        since = int(time.time()) - 1
        # A process inside the node wants more than the whole limit, so no reclaim of page cache can make
        # room (usage counts cache: a smaller ask once fit after reclaim). It volunteers to be the OOM
        # killer's victim (oom_score_adj 1000), as a batch job would: otherwise the kernel picks the
        # largest process, which on a loaded machine may be a Ray worker (CI saw 6 kills and none of it).
        grow_mb = used_mb + 250
        grow = container.exec_run([sys.executable, "-c", "open('/proc/self/oom_score_adj', 'w').write('1000'); "
                                   f"x = b'1' * ({grow_mb} << 20)"])
        container.reload()
        # Docker reports every OOM kill in a container as an `oom` event; State.OOMKilled (Docker 20.10)
        # is set only when the container's own first process was the one killed and the container exited.
        events = list(live.engine.client.events(since=since, until=int(time.time()) + 1, decode=True,
                                                filters={"container": container.id, "event": "oom"}))
        print(json.dumps({"used_mb": used_mb, "limit_mb": used_mb + 200, "exec_exit": grow.exit_code,
                          "oom_events": len(events), "state": container.status,
                          "State.OOMKilled": container.attrs["State"]["OOMKilled"]}))
        assert grow.exit_code == 137  # SIGKILL: the OOM killer chose it
        assert events and events[0]["Actor"]["Attributes"]["name"] == NODE
    finally:
        fault.revert(ctx)
    group = cgroup_dir(live.container(), "memory")
    assert (group / "memory.limit_in_bytes").read_text().strip() == unlimited
    assert live.container().status == "running"
    live.wait("both replicas serving again", lambda: live.serving_both(ctx), 240, 2)


def test_draining_a_replica_off_a_throttled_machine_moves_it_to_a_fresh_one_and_the_cause_goes_with_it(live, ctx):
    # Last in the module: the replica leaves sandbox-node-1 for good.
    live.wait("a replica serving on the container node", lambda: live.serving_both(ctx), 240, 2)
    fault = build({"type": "container-cpu-quota", "replica": "random", "cpu_fraction": 0.15})
    try:
        target = fault.inject(ctx).replica
        # The cause is the container's quota, whichever replica Serve lists RUNNING this instant.
        still = fault.in_place(ctx)
        assert still in (f"replica {target} serves from {NODE}, held to 0.15 CPU",
                         f"a replica's node, {NODE}, held to 0.15 CPU"), (still, list_replicas(ctx))
        report = drain_replica(ctx, target, Steps(), timeout_s=240)
        fresh = "sandbox-node-2"
        assert report["moved"] == {"from": NODE, "to": fresh}
        assert live.state.container_nodes == [fresh]
        assert StackState.load(live.cfg.state_file).container_nodes == [fresh]  # what `down` will remove
        with pytest.raises(docker.errors.NotFound):
            live.engine.client.containers.get(NODE)
        [(replacement, node)] = container_replicas(ctx)
        assert node == fresh and replacement.replica_id in report["replaced_by"]
        assert len(list_replicas(ctx)) == 2
        assert fault.in_place(ctx) is None
        assert live.engine.client.containers.get(fresh).attrs["HostConfig"]["CpuQuota"] in (0, -1, None)
    finally:
        fault.revert(ctx)  # the throttled container is gone, and its quota with it: nothing to put back
    summary = live.traffic(4, seed=7)
    assert summary["statuses"] == {"200": summary["sent"]}
