"""Serving: the engine behind Ray Serve, with an OpenAI-compatible API and vLLM's metrics.

    proxy ──HTTP──▶ OpenAIIngress (FastAPI, 1 replica) ──handle──▶ LLMServer × N
                                                                   └─ EngineLoop thread ─ LLMEngine

`app.build_app` is the import path `services/serve_config.yaml` names. Modules
that import Ray (`app`, `ingress`, `llm_server`, `metrics`) are only imported
where Serve runs them; `config`, `protocol` and `engine_loop` are Ray-free.
"""
