"""Ray's token authentication on the sandbox's own cluster: its GCS, dashboard (Serve's REST API, the job and
state APIs) and every driver refuse a caller without the token (Ray >= 2.52, `RAY_AUTH_MODE=token`).

    path = ensure()                    # ~/.config/inference-sandbox/ray-token, 0600, made once for this user
    env |= server_env(path)            # what `ray start` (and a container node joining it) runs with
    headers(path)                      # {"Authorization": "Bearer ..."} for the dashboard's HTTP API
    use_in_driver(path); ray.init(address=...)

Only the file's path travels (in the environment of what the sandbox starts and in the stack's state):
the token itself is never printed, logged, exported or written anywhere else. The candidate's way in is
the OpenAI API and Prometheus; the control plane, where a fault's switches live, is the sandbox's.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

MODE_VAR, PATH_VAR = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"
FILE_VAR = "SANDBOX_RAY_TOKEN_FILE"  # where the token lives, if not in the default place


def default_path() -> Path:
    return Path(os.environ.get(FILE_VAR) or Path.home() / ".config" / "inference-sandbox" / "ray-token")


def ensure(path: Path | None = None) -> Path:
    """The token file, made (random, 0600, in a 0700 directory) if there is none yet.

    One per user and machine, not one per sandbox home: a process talks to one Ray cluster at a time, but Ray
    loads a driver's token once, and a test session brings up stacks in several homes."""
    path = default_path() if path is None else Path(path)
    if not path.is_file():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        os.replace(tmp, path)
    return path


def server_env(token_file: str | Path) -> dict[str, str]:
    return {MODE_VAR: "token", PATH_VAR: str(token_file)}


def headers(token_file: str | Path | None) -> dict[str, str]:
    """The dashboard's Authorization header; none for a cluster without token authentication."""
    if not token_file:
        return {}
    return {"Authorization": f"Bearer {Path(token_file).read_text().strip()}"}


def use_in_driver(token_file: str | Path | None) -> None:
    """Before `ray.init(address=...)` in this process: token mode and the token's file for a cluster that has
    them, neither for one that has not (a cluster joined with `up --address`). Ray reads the
    mode into its config when it is imported, so the config is read again with the variables as they are now."""
    from ray._raylet import Config

    for key, value in (server_env(token_file) if token_file else {MODE_VAR: None, PATH_VAR: None}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    Config.initialize("")


if __name__ == "__main__":  # `python3 -m services.stack.ray_token`: the file's path (made if need be), never the token
    print(ensure())
