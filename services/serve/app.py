"""The Serve application: `import_path: services.serve.app:build_app` in the config YAML."""
from __future__ import annotations

from ray.serve import Application

from services.serve.config import ServeAppConfig
from services.serve.ingress import OpenAIIngress
from services.serve.llm_server import LLMServer


def build_app(args: dict) -> Application:
    """OpenAIIngress → LLMServer; `args` is the YAML's application `args` (a ServeAppConfig)."""
    cfg = ServeAppConfig.from_dict(args).to_dict()
    return OpenAIIngress.bind(LLMServer.bind(cfg), cfg)
