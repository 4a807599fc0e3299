"""The leak scan: nothing a candidate can see may name the injected cause.

Surfaces scanned, as a candidate would see them during and after a drill:
  metrics    every metric name, label name and label value in Prometheus
  api        the API's responses and headers (models, health, a completion, a stream, an error)
  page       the page (alert name, summary, description)
  run files  the candidate-visible files of the run directory (everything but sealed/ and the TSDB)
  logs       the stack's logs (Ray's session logs: Serve controller and replica logs)
  processes  every process title and command line on the machine

Terms are the answer key's root-cause id and its obvious synonyms, the variant
key when it is specific (two words or more), and the fault types injected.
Matching ignores case and treats '-', '_' and whitespace alike.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx

from faults.registry import FAULT_TYPES
from services.stack.state import StackState

SYNONYMS: dict[str, tuple[str, ...]] = {
    "prefix-caching-disabled": ("prefix caching disabled", "prefix cache disabled", "prefix caching off",
                                "prefix cache off", "disable prefix caching"),
    "prefill-budget-too-small": ("prefill budget", "budget too small", "token budget cut"),
    "slow-attention-kernel": ("slow attention", "slow kernel"),
    "prompt-length-shift": ("prompt length shift", "prompts grew", "longer prompts"),
    "memory-headroom-too-small": ("memory headroom", "headroom too small", "activation headroom"),
    "kv-block-leak": ("block leak", "kv leak", "leaked blocks", "leak blocks", "leaking blocks"),
    "max-num-seqs-too-high": ("max num seqs too high", "too many sequences"),
    "batch-variant-numerics": ("batch variant", "batch variance", "nondeterministic reduction"),
    "sampler-seed-ignored": ("seed ignored", "ignore seed", "ignores seed", "ignored seed"),
    "replica-numerics-mismatch": ("numerics mismatch", "different numerics", "wrong dtype"),
    "cpu-throttled-replica": ("throttled replica", "cpu throttle fault", "throttle replica", "cpu-throttle"),
    "kernel-fallback": ("kernel fallback", "fallback kernel", "slow kernel path"),
    "kv-cache-too-small": ("kv cache too small", "tiny kv cache", "small kv cache", "small cache"),
    "max-num-seqs-too-low": ("max num seqs too low", "max_num_seqs too low", "max-num-seqs too low", "batch of one",
                             "batch cap", "too few sequences"),
    "weight-quantization-too-coarse": ("quantization too coarse", "coarse quantization", "bad quantization"),
    "kv-cache-quantization": ("kv cache quantization", "kv quantization", "bad kv scale", "kv scale"),
    "draft-model-mismatch": ("draft mismatch", "mismatched draft", "wrong draft", "draft model mismatch"),
    "speculation-too-deep": ("too deep", "speculation depth", "deep speculation", "too many draft tokens",
                             "drafts too many"),
    "stop-token-misconfigured": ("wrong stop token", "extra stop token", "extra eos", "stop token misconfigured",
                                 "eos misconfigured", "stops early"),
    "thread-oversubscription": ("oversubscription", "oversubscribed", "too many threads"),
    "cpu-limit-too-low": ("cpu limit too low", "limit too low", "lowered cpu limit", "in-place resize",
                          "vertical autoscaler"),
    # ("traffic surge" is the brief's public incident id, shown with every drill of it)
    "capacity-exceeded": ("capacity exceeded", "over capacity"),
    "no-fault": ("no fault", "control drill", "nothing injected", "no injection"),
}
FAULT_TYPE_PHRASES = ("replica override", "fault controller", "fault injection", "injected fault",
                      "inject fault", "injecting")


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.lower())


def terms_for(answer: dict, variant_key: str, fault_types: list[str]) -> list[str]:
    terms = [answer["root_cause"], *SYNONYMS.get(answer["root_cause"], ())]
    if len(re.split(r"[-_\s]+", variant_key)) >= 2:
        terms.append(variant_key)
    terms += [t for t in fault_types if not getattr(FAULT_TYPES.get(t), "public", False)
              and len(re.split(r"[-_\s]+", t)) >= 2]
    terms += FAULT_TYPE_PHRASES
    return sorted({_norm(t) for t in terms})


def find(text: str, terms: list[str]) -> list[str]:
    norm = _norm(text)
    return [t for t in terms if re.search(rf"(?<![a-z0-9]){re.escape(t)}(?![a-z0-9])", norm)]


class LeakScan:
    def __init__(self, terms: list[str]):
        self.terms = terms
        self.hits: list[dict] = []
        self.scanned: dict[str, int] = {}

    def scan(self, surface: str, where: str, text: str) -> None:
        self.scanned[surface] = self.scanned.get(surface, 0) + 1
        for term in find(text, self.terms):
            self.hits.append({"surface": surface, "where": where, "term": term})

    # -- surfaces ------------------------------------------------------------------
    def metrics(self, prom) -> None:
        names = prom.label_values("__name__")
        self.scan("metrics", "metric names", "\n".join(names))
        for label in prom.label_names():
            self.scan("metrics", f"label {label}", label)
            if label == "__name__":
                continue
            values = prom.label_values(label)
            self.scan("metrics", f"values of label {label}", "\n".join(values))

    def api(self, api_url: str, model: str) -> None:
        with httpx.Client(base_url=api_url, timeout=60) as http:
            calls = [("GET", "/v1/models", None), ("GET", "/health", None),
                     ("POST", "/v1/completions", {"model": model, "prompt": "copy: abc -> ", "max_tokens": 4}),
                     ("POST", "/v1/chat/completions", {"model": model, "max_tokens": 4, "stream": True,
                                                       "messages": [{"role": "user", "content": "sort: cab -> "}]}),
                     ("POST", "/v1/completions", {"model": model, "prompt": "x", "max_tokens": -1})]
            for method, path, body in calls:
                resp = http.request(method, path, json=body)
                headers = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
                self.scan("api", f"{method} {path}", headers + "\n" + resp.text)

    def page(self, page: dict | None) -> None:
        if page:
            self.scan("page", "page", json.dumps(page))

    def run_files(self, run_dir: Path) -> None:
        for path in sorted(Path(run_dir).rglob("*")):
            rel = path.relative_to(run_dir)
            if not path.is_file() or rel.parts[0] in ("sealed", "prometheus"):
                continue
            self.scan("run files", str(rel), path.read_text(errors="replace"))

    def logs(self, *dirs: Path) -> None:
        for d in dirs:
            if not d or not Path(d).is_dir():
                continue
            for path in sorted(Path(d).rglob("*")):
                if path.is_file() and path.suffix in (".log", ".out", ".err", ".txt", ".jsonl", ".json") \
                        and path.stat().st_size < 50_000_000:
                    self.scan("logs", str(path), path.read_text(errors="replace"))

    def processes(self) -> None:
        mine = _ancestors(os.getpid())  # the operator's own command line (e.g. `sandbox verify --variant ...`)
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in mine:
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                comm = Path(f"/proc/{pid}/comm").read_text()
            except OSError:
                continue
            self.scan("processes", f"pid {pid}", cmd + "\n" + comm)

    def result(self) -> dict:
        return {"pass": not self.hits, "terms": self.terms, "hits": self.hits[:50], "scanned": self.scanned}


def _ancestors(pid: int) -> set[int]:
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return seen


def scan_drill(drill, prom) -> dict:
    """Every surface of a drill that has just run (stack still up)."""

    answer = drill.sealed_answer()
    scan = LeakScan(terms_for(answer, drill.plan.variant, [f["spec"].get("type", "") for f in drill.fault_log]))
    state = StackState.load(drill.cfg.state_file)
    scan.metrics(prom)
    scan.api(state.api_url, state.model_name)
    scan.page(drill.page)
    scan.run_files(drill.record.dir)
    scan.logs(Path(state.run_dir) / "logs", Path(state.ray_session_dir or "/nonexistent") / "logs")
    scan.processes()
    return scan.result()
