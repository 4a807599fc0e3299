"""Build the Grafana dashboards (JSON models) from Python; the committed JSON is what Grafana provisions.

    python dashboards/build.py          # writes dashboards/grafana/*.json

Four dashboards, as a vLLM / Ray Serve LLM team runs them: LLM serving overview, Replicas, Model
quality, Ray Serve. Each has template variables for the datasource, model, replica and version, so
every panel can be narrowed the way an on-call engineer narrows a question. Panel titles say what
is measured, never what it would mean.
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "grafana"
SEL = 'model_name=~"$model", replica=~"$replica", version=~"$version"'  # the template variables
DS = {"type": "prometheus", "uid": "${datasource}"}


def q(h: str, quantile: float, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({quantile}, sum by ({group}) (rate(vllm:{h}_bucket{{{SEL}}}[1m])))"


def rate(metric: str, by: str = "", sel: str = SEL) -> str:
    inner = f"rate({metric}{{{sel}}}[1m])"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def ratio(num: str, den: str, by: str = "") -> str:
    return f"{rate(num, by)} / {rate(den, by)}"


class Board:
    def __init__(self, uid: str, title: str, description: str):
        self.uid, self.title, self.description = uid, title, description
        self.panels: list[dict] = []
        self._x = self._y = 0

    def row(self, title: str) -> None:
        if self._x:
            self._x, self._y = 0, self._y + 8
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y}, "panels": []})
        self._y += 1

    def panel(self, title: str, targets: list[tuple[str, str]], unit: str = "short", description: str = "",
              kind: str = "timeseries", width: int = 8) -> None:
        if self._x + width > 24:
            self._x, self._y = 0, self._y + 8
        self.panels.append({
            "type": kind, "title": title, "description": description, "id": len(self.panels) + 1,
            "datasource": DS, "gridPos": {"h": 8, "w": width, "x": self._x, "y": self._y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}} if kind == "timeseries" else {},
            "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
                        for i, (expr, legend) in enumerate(targets)],
        })
        self._x += width

    def model(self) -> dict:
        def var(name: str, query: str, label: str) -> dict:
            return {"name": name, "label": label, "type": "query", "datasource": DS, "refresh": 2,
                    "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
                    "includeAll": True, "multi": True, "allValue": ".*",
                    "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}
        return {
            "uid": self.uid, "title": self.title, "description": self.description, "tags": ["sandbox", "llm"],
            "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1, "timezone": "utc",
            "time": {"from": "now-15m", "to": "now"}, "refresh": "5s",
            "timepicker": {"refresh_intervals": ["5s", "10s", "30s", "1m"]},
            "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                      "enable": True, "hide": True, "name": "Annotations & Alerts",
                                      "type": "dashboard"}]},
            "templating": {"list": [
                {"name": "datasource", "label": "datasource", "type": "datasource", "query": "prometheus",
                 "current": {"selected": True, "text": "Prometheus", "value": "prometheus"}},
                var("model", "label_values(vllm:num_requests_running, model_name)", "model"),
                var("replica", 'label_values(vllm:num_requests_running{model_name=~"$model"}, replica)', "replica"),
                var("version", 'label_values(vllm:num_requests_running{model_name=~"$model"}, version)', "version"),
            ]},
            "panels": self.panels,
        }


def overview() -> Board:
    b = Board("llm-serving-overview", "LLM serving overview", "Latency, throughput, scheduler and cache of the fleet.")
    b.row("Latency")
    b.panel("Time to first token", [(q("time_to_first_token_seconds", p), f"p{int(p * 100)}") for p in (0.5, 0.9, 0.99)], "s")
    b.panel("Inter-token latency", [(q("inter_token_latency_seconds", p), f"p{int(p * 100)}") for p in (0.5, 0.9, 0.99)], "s")
    b.panel("End-to-end request latency", [(q("e2e_request_latency_seconds", p), f"p{int(p * 100)}") for p in (0.5, 0.99)], "s")
    b.panel("Request phases (p50)", [(q("request_queue_time_seconds", 0.5), "queue"),
                                     (q("request_prefill_time_seconds", 0.5), "prefill"),
                                     (q("request_decode_time_seconds", 0.5), "decode")], "s")
    b.panel("Request phases (p99)", [(q("request_queue_time_seconds", 0.99), "queue"),
                                     (q("request_prefill_time_seconds", 0.99), "prefill"),
                                     (q("request_decode_time_seconds", 0.99), "decode")], "s")
    b.panel("Client-side time to first token", [
        (f"histogram_quantile({p}, sum by (le) (rate(sandbox_traffic_time_to_first_token_seconds_bucket[1m])))",
         f"p{int(p * 100)}") for p in (0.5, 0.99)], "s")
    b.row("Throughput and load")
    b.panel("Token throughput", [(rate("vllm:prompt_tokens_total"), "prompt tokens/s"),
                                 (rate("vllm:generation_tokens_total"), "generation tokens/s")])
    b.panel("Requests running and waiting", [(f"sum(vllm:num_requests_running{{{SEL}}})", "running"),
                                             (f"sum(vllm:num_requests_waiting{{{SEL}}})", "waiting")])
    b.panel("Tokens per engine step", [(q("iteration_tokens_total", p), f"p{int(p * 100)}") for p in (0.5, 0.99)])
    b.panel("Prompt and output lengths (mean)", [
        (ratio("vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count"), "prompt tokens"),
        (ratio("vllm:request_generation_tokens_sum", "vllm:request_generation_tokens_count"), "output tokens")])
    b.panel("Outputs within 5 tokens (share of finished requests)", [
        (rate("vllm:request_generation_tokens_bucket", sel=SEL + ', le="5.0"') + " / "
         + rate("vllm:request_generation_tokens_count"), "share")], "percentunit")
    b.panel("Finished requests by reason", [(rate("vllm:request_success_total", "finished_reason"), "{{finished_reason}}")], "reqps")
    b.panel("Client requests by status", [(rate("sandbox_traffic_requests_total", "status", sel=""), "{{status}}")], "reqps")
    b.row("Cache and scheduler")
    b.panel("KV-cache usage", [(f"max by (replica) (vllm:kv_cache_usage_perc{{{SEL}}})", "{{replica}}")], "percentunit")
    b.panel("Prefix-cache hit rate", [(ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"), "hit rate")],
            "percentunit")
    b.panel("Preemptions", [(rate("vllm:num_preemptions_total"), "preemptions/s")])
    b.panel("Speculative decoding acceptance", [
        (ratio("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"), "acceptance")],
        "percentunit")
    b.panel("Speculative decoding tokens per step", [
        (ratio("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_drafts_total"), "drafted"),
        (ratio("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"), "accepted")])
    return b


def replicas() -> Board:
    b = Board("llm-replicas", "Replicas", "The same signals split by replica and version.")
    b.row("Latency by replica")
    b.panel("Inter-token latency p99", [(q("inter_token_latency_seconds", 0.99, "replica"), "{{replica}}")], "s")
    b.panel("Time to first token p99", [(q("time_to_first_token_seconds", 0.99, "replica"), "{{replica}}")], "s")
    b.panel("Queue time p99", [(q("request_queue_time_seconds", 0.99, "replica"), "{{replica}}")], "s")
    b.panel("Inter-token latency p50 by version", [(q("inter_token_latency_seconds", 0.5, "version"), "{{version}}")], "s")
    b.row("Resources")
    b.panel("CPU used (cores)", [(f"sum by (replica) (rate(sandbox:replica_cpu_seconds_total{{{SEL}}}[1m]))", "{{replica}}")])
    b.panel("CPU throttled (s per s)", [
        (f"sum by (replica) (rate(sandbox:replica_cpu_throttled_seconds_total{{{SEL}}}[1m]))", "{{replica}}")])
    b.panel("Device memory used", [(f"max by (replica) (sandbox:device_memory_used_bytes{{{SEL}}})", "{{replica}} used"),
                                   (f"max by (replica) (sandbox:device_memory_capacity_bytes{{{SEL}}})", "{{replica}} capacity")],
            "bytes")
    b.row("Scheduler by replica")
    b.panel("Running", [(f"max by (replica) (vllm:num_requests_running{{{SEL}}})", "{{replica}}")])
    b.panel("Waiting", [(f"max by (replica) (vllm:num_requests_waiting{{{SEL}}})", "{{replica}}")])
    b.panel("KV-cache usage", [(f"max by (replica) (vllm:kv_cache_usage_perc{{{SEL}}})", "{{replica}}")], "percentunit")
    b.panel("Preemptions", [(rate("vllm:num_preemptions_total", "replica"), "{{replica}}")])
    b.panel("Tokens per step p50", [(q("iteration_tokens_total", 0.5, "replica"), "{{replica}}")])
    b.panel("Replica starts", [("sum by (deployment) (ray_serve_deployment_replica_starts_total)", "{{deployment}}")])
    b.panel("Engine settings", [(f"max by (replica, version, enable_prefix_caching, max_num_seqs, max_num_batched_tokens, "
                                 f"gpu_memory_utilization, quantization, cache_dtype, dtype, num_speculative_tokens) "
                                 f"(vllm:cache_config_info{{{SEL}}})", "")], kind="table", width=24)
    return b


def quality() -> Board:
    b = Board("llm-model-quality", "Model quality", "The canary: per-task accuracy and temperature-0 consistency.")
    checks = "sandbox_canary_checks_total"
    b.row("Accuracy")
    b.panel("Accuracy by task", [(f'sum by (task) (rate({checks}{{result="correct"}}[1m])) / sum by (task) (rate({checks}[1m]))',
                                  "{{task}}")], "percentunit")
    b.panel("Error rate by answer length", [
        (f'sum by (length) (rate({checks}{{result="wrong"}}[1m])) / sum by (length) (rate({checks}[1m]))', "{{length}}")],
        "percentunit")
    b.panel("Canary checks per second", [(f"sum by (task) (rate({checks}[1m]))", "{{task}}")])
    cons = "sandbox_canary_consistency_checks_total"
    b.row("Consistency")
    b.panel("Repeated prompts answered differently, by mode", [
        (f'sum by (mode) (rate({cons}{{result="mismatch"}}[1m])) / sum by (mode) (rate({cons}[1m]))', "{{mode}}")],
        "percentunit")
    b.panel("... by load", [
        (f'sum by (load) (rate({cons}{{result="mismatch"}}[1m])) / sum by (load) (rate({cons}[1m]))', "{{load}}")],
        "percentunit")
    b.panel("... by replica", [
        (f'sum by (replica) (rate({cons}{{result="mismatch"}}[1m])) / sum by (replica) (rate({cons}[1m]))', "{{replica}}")],
        "percentunit")
    b.panel("Canary requests by status", [("sum by (probe, status) (rate(sandbox_canary_requests_total[1m]))",
                                           "{{probe}} {{status}}")], width=24)
    return b


def ray_serve() -> Board:
    b = Board("ray-serve", "Ray Serve", "Ray Serve's own view: replicas, health, queues, HTTP.")
    b.row("Deployments")
    b.panel("Replica starts", [("sum by (deployment) (ray_serve_deployment_replica_starts_total)", "{{deployment}}")])
    b.panel("Health-check failures", [("sum by (deployment) (ray_serve_health_check_failures_total)", "{{deployment}}")])
    b.panel("Requests processed per second", [
        ("sum by (deployment) (rate(ray_serve_deployment_request_counter_total[1m]))", "{{deployment}}")], "reqps")
    b.panel("Queued requests at the handle", [("sum by (deployment) (ray_serve_deployment_queued_queries)", "{{deployment}}")])
    b.panel("Replica processing latency p99", [
        ("histogram_quantile(0.99, sum by (le, deployment) (rate(ray_serve_deployment_processing_latency_ms_bucket[1m])))",
         "{{deployment}}")], "ms")
    b.panel("Ongoing HTTP requests at the proxy", [("sum(ray_serve_num_ongoing_http_requests)", "ongoing")])
    return b


BOARDS = (overview, replicas, quality, ray_serve)


def build() -> list[Path]:
    OUT.mkdir(exist_ok=True)
    paths = []
    for make in BOARDS:
        board = make().model()
        path = OUT / f"{board['uid']}.json"
        path.write_text(json.dumps(board, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in build():
        print(p)
