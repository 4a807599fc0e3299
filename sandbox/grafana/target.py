"""Which Grafana to talk to and how to log in: one validated dataclass, and a connected client.

The client is `grafana-client` (the maintained successor of `grafana-api`). Its errors are turned
into `GrafanaError`, whose message names the URL, the HTTP status and Grafana's own message, so a
CLI can print one clear line.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

import requests
from grafana_client import GrafanaApi
from grafana_client.client import GrafanaException

ENV_PREFIX = "SANDBOX_GRAFANA_"  # SANDBOX_GRAFANA_URL, _TOKEN, _USER, _PASSWORD


class GrafanaError(RuntimeError):
    """Grafana could not be reached, or it refused a request. `status` is None when nothing answered."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class GrafanaTarget:
    url: str  # the Grafana root, e.g. http://127.0.0.1:3000 (a sub-path is kept)
    token: str | None = None  # a service-account token (Bearer)
    user: str | None = None  # ... or basic auth
    password: str | None = None
    timeout_s: float = 10.0

    def __post_init__(self):
        parsed = urlparse(self.url or "")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"Grafana URL must be http:// or https:// with a host (port and path optional), got {self.url!r}")
        if parsed.username or parsed.password:
            raise ValueError("put Grafana credentials in --token or --user/--password, not in the URL")
        if self.token and (self.user or self.password):
            raise ValueError("give either a Grafana token or a user and password, not both")
        if bool(self.user) != bool(self.password):
            raise ValueError("a Grafana user needs a password (and a password a user)")
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number, got {self.timeout_s!r}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> GrafanaTarget | None:
        """The Grafana configured by SANDBOX_GRAFANA_URL (+ _TOKEN or _USER/_PASSWORD); None when unset."""
        env = os.environ if env is None else env
        url = env.get(ENV_PREFIX + "URL")
        if not url:
            return None
        return cls(url, token=env.get(ENV_PREFIX + "TOKEN") or None, user=env.get(ENV_PREFIX + "USER") or None,
                   password=env.get(ENV_PREFIX + "PASSWORD") or None)

    def api(self) -> GrafanaApi:
        credential = self.token or ((self.user, self.password) if self.user else None)
        return GrafanaApi.from_url(self.url.rstrip("/"), credential=credential, timeout=self.timeout_s)


def call(target: GrafanaTarget, what: str, fn, *args, **kwargs):
    """fn(*args, **kwargs), with grafana-client's and requests' failures as one GrafanaError."""
    try:
        return fn(*args, **kwargs)
    except GrafanaException as e:
        raise GrafanaError(f"Grafana at {target.url} refused to {what}: HTTP {e.status_code}: "
                           f"{_message(e.response) or e.message}", e.status_code) from None
    except requests.exceptions.ConnectionError as e:
        raise GrafanaError(f"Grafana at {target.url} is unreachable ({what}): {_reason(e)}") from None
    except requests.exceptions.Timeout:
        raise GrafanaError(f"Grafana at {target.url} did not answer within {target.timeout_s:g}s ({what})") from None
    except requests.exceptions.RequestException as e:
        raise GrafanaError(f"Grafana at {target.url}: {what} failed: {e}") from None


def _message(response) -> str:
    if isinstance(response, dict):
        return str(response.get("message") or "")
    return str(response or "").strip()[:200]


def _reason(e: Exception) -> str:
    # requests nests the socket error a few levels deep; its last line is the readable one.
    text = str(e.args[0] if e.args else e)
    return text.rsplit(": ", 1)[-1].strip(" '\")") or type(e).__name__
