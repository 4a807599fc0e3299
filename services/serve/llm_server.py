"""The `LLMServer` deployment: one engine per replica, streamed to the ingress.

`generate` is the replica's only request path. It speaks plain dicts so that
nothing but data crosses Ray:

    in:  {"request_id", "prompt", "sampling": SamplingParams kwargs}
    out: {"prompt_tokens": n, "replica": id, "version": v}      first, once accepted
         {"text": delta, "completion_tokens": n, "finish_reason": None | "stop" | "length"} ...
         {"error": {"status", "message", "code"}}               instead, and last

When the caller goes away Serve cancels the generator; the `finally` aborts the
engine request, which frees its KV blocks.

A replica's engine can also be rebuilt in place with settings of its own
(`replica_runtime`): same process, same metric labels, a new engine config.
"""
from __future__ import annotations

# Lazy imports: the Serve controller and the app builder import this class; the engine (torch), its
# metrics and the runtime actor load in the replica's own process, when it starts.

import asyncio
import dataclasses
import os

from ray import serve

from services.serve.config import ReplicaKnobs, ServeAppConfig
from services.serve.engine_loop import EngineDeadError, EngineLoop


def _error(status: int, message: str, code: str | None = None) -> dict:
    return {"error": {"status": status, "message": message, "code": code}}


@serve.deployment(
    name="LLMServer",
    ray_actor_options={"num_cpus": 1},
    max_ongoing_requests=64,
    health_check_period_s=2,
    health_check_timeout_s=10,
    graceful_shutdown_timeout_s=120,
)
class LLMServer:
    def __init__(self, app_config: dict):
        from services.engine import LLMEngine
        from services.serve.metrics import ServingMetrics, config_info_labels
        from services.serve.replica_runtime import RuntimeWatcher

        cfg = ServeAppConfig.from_dict(app_config)
        self.app_config = cfg
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.deployed_config = cfg.engine_config()
        self.engine_config = self.deployed_config  # plus this replica's own settings; engine thread writes it
        engine = LLMEngine(self.engine_config)
        self.metrics = ServingMetrics(cfg.model_name, self.replica, cfg.version,
                                      spec_decode=self.engine_config.num_speculative_tokens > 0)
        self.knobs = ReplicaKnobs()
        self.loop = EngineLoop(engine, self.metrics, torch_threads=self.engine_config.torch_threads,
                               wedge_timeout_s=cfg.wedge_timeout_s).start()
        self.loop.call(lambda e: self.metrics.set_config_info(config_info_labels(e)))
        self.watcher = RuntimeWatcher(self.replica, self._use_settings).start()

    def reconfigure(self, user_config: dict) -> None:
        """Apply runtime knobs (the deployment's user_config) in place: same process, same engine."""
        from services.serve.knobs import apply_knobs
        from services.serve.metrics import config_info_labels

        knobs = ReplicaKnobs.from_dict(user_config)

        def apply(engine):
            apply_knobs(engine, knobs, self.engine_config)
            self.metrics.set_config_info(config_info_labels(engine))
            self.knobs = knobs  # here, so an engine rebuilt next gets these knobs

        self.loop.call(apply)
        self.loop.export_metrics = knobs.export_metrics

    def _use_settings(self, settings: dict) -> None:
        """Rebuild the engine with the deployed config plus `settings` (EngineConfig fields); blocks until done."""
        config = dataclasses.replace(self.deployed_config, **settings)  # validated here, before any drain
        previous = self.engine_config
        self.loop.rebuild(build=lambda: self._engine_for(config), restore=lambda: self._engine_for(previous))

    def _engine_for(self, config):
        """A new engine for `config`, with the current knobs; on the engine thread (EngineLoop.rebuild)."""
        from services.engine import LLMEngine
        from services.serve.knobs import apply_knobs
        from services.serve.metrics import config_info_labels

        engine = LLMEngine(config)
        apply_knobs(engine, self.knobs, config)
        self.engine_config = config
        self.metrics.set_config_info(config_info_labels(engine))
        return engine

    async def generate(self, request: dict):
        from services.engine import SamplingParams

        rid = request["request_id"]
        try:
            params = SamplingParams(**request["sampling"])
        except (TypeError, ValueError) as e:
            yield _error(400, str(e))
            return
        stream = None
        try:
            try:
                stream = self.loop.add_request(rid, request["prompt"], params)
                prompt_tokens = await stream.accepted()
            except EngineDeadError as e:
                yield _error(500, str(e), "engine_dead")
                return
            except ValueError as e:
                code = "context_length_exceeded" if ("max_model_len" in str(e) or "KV blocks" in str(e)) else None
                yield _error(400, str(e), code)
                return
            yield {"prompt_tokens": prompt_tokens, "replica": self.replica, "version": self.app_config.version}
            async for out in stream:
                completion = out.outputs[0]
                yield {"text": out.delta_text, "completion_tokens": len(completion.token_ids),
                       "finish_reason": completion.finish_reason if out.finished else None}
        except EngineDeadError as e:
            yield _error(500, str(e), "engine_dead")
        finally:
            if stream is not None and not stream.finished:
                self.loop.abort(rid)

    def check_health(self) -> None:
        if self.watcher.draining:  # Serve stops routing here, lets what is in flight finish, and replaces us
            raise RuntimeError("draining: asked to stop taking requests")
        self.loop.check_health()

    async def info(self) -> dict:
        """Who this replica is and what its engine is doing (for `sandbox status` and tests)."""
        snap = self.loop.last_snapshot
        sched, num_blocks = await asyncio.to_thread(self.loop.call, lambda e: (e.scheduler.config, e.num_blocks))
        return {"pid": os.getpid(), "replica": self.replica, "version": self.app_config.version,
                "model_name": self.app_config.model_name, "knobs": self.knobs.to_dict(),
                "max_num_seqs": sched.max_num_seqs, "max_num_batched_tokens": sched.max_num_batched_tokens,
                "num_gpu_blocks": num_blocks,
                "num_running": snap.num_running, "num_waiting": snap.num_waiting,
                "kv_cache_usage": snap.kv_cache_usage}

    def __del__(self):
        watcher = getattr(self, "watcher", None)
        if watcher is not None:
            watcher.stop()
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.stop()
