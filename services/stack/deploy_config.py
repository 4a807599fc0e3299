"""The Serve config YAML as the sandbox deploys it: ports filled in, `--set` overrides applied.

Override keys:
    version=v7                       the application's version label
    replicas=3                       LLMServer num_replicas (in place, no new version)
    engine.<field>=<v> | <field>=<v> an EngineConfig field: a new version, rolled out replica by replica
    knobs.<field>=<v>                a ReplicaKnobs field (LLMServer user_config): reconfigure() in place
    ingress.<field>=<v>              an IngressSettings field (OpenAIIngress user_config, e.g. its admission
                                     limit max_inflight_requests): reconfigure() in place
    env.<NAME>=<v>                   an environment variable of the replicas' processes (LLMServer's
                                     runtime_env), read where a library reads it, at start: a new version,
                                     rolled out; an empty value removes it
    model_name=..., default_max_tokens=..., wedge_timeout_s=...   other application args
Values are YAML scalars (`true`, `512`, `0.5`, `null`).
"""
from __future__ import annotations

import copy
import re
from dataclasses import fields
from pathlib import Path

import yaml

from services.engine.config import EngineConfig
from services.serve.admission import IngressSettings
from services.serve.config import ReplicaKnobs, ServeAppConfig

SERVER, INGRESS = "LLMServer", "OpenAIIngress"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def _engine_fields() -> set[str]:
    return {f.name for f in fields(EngineConfig)}


def next_version(version: str) -> str:
    """v1 -> v2; anything else gets a -2 (then -3, ...) suffix."""
    m = re.fullmatch(r"(.*?)(\d+)", version)
    return f"{m.group(1)}{int(m.group(2)) + 1}" if m else f"{version}-2"


def deployed_engine_setting(path: str | Path | None, name: str, default):
    """An engine setting of the Serve config at `path` as deployed (`engine.<name>`), `default` when the config
    names none or cannot be read (no stack yet, a config that is not ours)."""
    try:
        value = DeployConfig.load(Path(path)).args.get("engine", {}).get(name)
    except (OSError, TypeError, ValueError, AttributeError, yaml.YAMLError):
        return default
    return default if value is None else value


class DeployConfig:
    def __init__(self, data: dict):
        apps = data.get("applications") if isinstance(data, dict) else None
        if not apps or len(apps) != 1:
            raise ValueError("the Serve config must define exactly one application")
        self.data = data
        self.validate()

    @classmethod
    def load(cls, path: Path) -> DeployConfig:
        return cls(yaml.safe_load(Path(path).read_text()))

    def save(self, path: Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.data, sort_keys=False))

    def copy(self) -> DeployConfig:
        return DeployConfig(copy.deepcopy(self.data))

    # -- views ----------------------------------------------------------------
    @property
    def app(self) -> dict:
        return self.data["applications"][0]

    @property
    def app_name(self) -> str:
        return self.app.get("name", "default")

    @property
    def args(self) -> dict:
        return self.app.setdefault("args", {})

    def deployment(self, name: str) -> dict:
        for d in self.app.setdefault("deployments", []):
            if d.get("name") == name:
                return d
        entry = {"name": name}
        self.app["deployments"].append(entry)
        return entry

    @property
    def version(self) -> str:
        return ServeAppConfig.from_dict(self.args).version

    @property
    def model_name(self) -> str:
        return ServeAppConfig.from_dict(self.args).model_name

    @property
    def env(self) -> dict[str, str]:
        """The replicas' environment variables this config sets (LLMServer's runtime_env)."""
        options = self.deployment(SERVER).get("ray_actor_options") or {}
        return dict((options.get("runtime_env") or {}).get("env_vars") or {})

    def _set_env(self, name: str, value) -> None:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"env.{name}: an environment variable name is upper-case letters, digits and '_'")
        env = self.env
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
        options = self.deployment(SERVER).setdefault("ray_actor_options", {})
        runtime_env = {k: v for k, v in (options.get("runtime_env") or {}).items() if k != "env_vars"}
        if env:
            runtime_env["env_vars"] = env
        if runtime_env:
            options["runtime_env"] = runtime_env
        else:
            options.pop("runtime_env", None)

    @property
    def replicas(self) -> int:
        return int(self.deployment(SERVER).get("num_replicas", 1))

    def validate(self) -> None:
        ServeAppConfig.from_dict(self.args)
        ReplicaKnobs.from_dict(self.deployment(SERVER).get("user_config"))
        IngressSettings.from_dict(self.deployment(INGRESS).get("user_config"))
        replicas = self.deployment(SERVER).get("num_replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be a positive integer, got {replicas!r}")

    # -- changes (each returns a new config) ------------------------------------
    def for_run(self, host: str, api_port: int, replicas: int | None = None) -> DeployConfig:
        new = self.copy()
        new.data["http_options"] = {**new.data.get("http_options", {}), "host": host, "port": api_port}
        if replicas is not None:
            new.deployment(SERVER)["num_replicas"] = replicas
        new.validate()
        return new

    def with_overrides(self, assignments: list[str], version: str | None = None) -> DeployConfig:
        """Apply `key=value` overrides; a change to the application args gets the next version."""
        new = self.copy()
        before, env_before = copy.deepcopy(new.args), new.env
        engine_fields = _engine_fields()
        knob_fields = {f.name for f in fields(ReplicaKnobs)}
        ingress_fields = {f.name for f in fields(IngressSettings)}
        app_fields = {f.name for f in fields(ServeAppConfig)} - {"engine"}
        for item in assignments:
            key, sep, raw = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--set wants key=value, got {item!r}")
            value = yaml.safe_load(raw) if raw else None
            section, _, name = key.rpartition(".")
            if section == "knobs" and name in knob_fields:
                new.deployment(SERVER).setdefault("user_config", {})
                new.deployment(SERVER)["user_config"] = {**(new.deployment(SERVER)["user_config"] or {}),
                                                         name: value}
            elif section == "ingress" and name in ingress_fields:
                new.deployment(INGRESS)["user_config"] = {**(new.deployment(INGRESS).get("user_config") or {}),
                                                          name: value}
            elif section in ("", "engine") and name in engine_fields and (section or name not in app_fields):
                new.args.setdefault("engine", {})[name] = value
            elif section == "env" and name:
                new._set_env(name, value)
            elif section == "" and name == "replicas":
                new.deployment(SERVER)["num_replicas"] = value
            elif section == "" and name in app_fields:
                new.args[name] = value
            else:
                raise ValueError(f"unknown setting {key!r}: use version, replicas, engine.<EngineConfig field>, "
                                 f"knobs.<{'|'.join(sorted(knob_fields))}>, "
                                 f"ingress.<{'|'.join(sorted(ingress_fields))}>, env.<NAME> or "
                                 f"{', '.join(sorted(app_fields))}")
        if version is not None:
            new.args["version"] = version
        elif (new.args != before or new.env != env_before) and new.args.get("version") == before.get("version"):
            new.args["version"] = next_version(str(before.get("version", "v1")))
        new.validate()
        return new

    def check_engine(self) -> None:
        """Validate the engine settings here, before Serve starts replicas with them."""
        ServeAppConfig.from_dict(self.args).engine_config()
