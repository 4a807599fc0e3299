"""The versions this stack has deployed, from the configs the deployer keeps in the stack's run directory.

`sandbox up` writes `serve_config.yaml` (the first version); every deploy after it writes
`serve_config.<n>.<version>.yaml` (services/stack/deployer.py), so the files in order are the history. A version
label may come back (a fault's revert redeploys the previous version under its label); the latest config under
a label is what that label means now.
"""
from __future__ import annotations

import re
from pathlib import Path

from services.stack.deploy_config import DeployConfig, next_version

_NUMBERED = re.compile(r"serve_config\.(\d+)\.(.+)\.yaml")


def deployed(run_dir: str | Path) -> list[tuple[str, Path]]:
    """[(version, config path)] oldest first."""
    run_dir = Path(run_dir)
    found = []
    first = run_dir / "serve_config.yaml"
    if first.is_file():
        found.append((0, DeployConfig.load(first).version, first))
    for path in run_dir.glob("serve_config.*.yaml"):
        m = _NUMBERED.fullmatch(path.name)
        if m:
            found.append((int(m.group(1)), m.group(2), path))
    return [(version, path) for _, version, path in sorted(found)]


def rollback_target(run_dir: str | Path, current: str, version: str | None = None) -> DeployConfig:
    """The config to roll back to: `version`'s latest, or the version deployed before the current one took
    over. ValueError when there is none, or `version` is the current one or was never deployed."""
    history = deployed(run_dir)
    labels = [v for v, _ in history]
    if version is not None:
        if version == current:
            raise ValueError(f"{version} is the version serving now: name an earlier one ({_choices(labels, current)})")
        if version not in labels:
            raise ValueError(f"no version {version!r} was deployed on this stack ({_choices(labels, current)})")
        return DeployConfig.load(next(p for v, p in reversed(history) if v == version))
    # walk back past the current version's latest stretch to the version that served before it
    i = len(history) - 1
    while i >= 0 and history[i][0] == current:
        i -= 1
    if i < 0:
        raise ValueError(f"nothing to roll back to: {current} is the only version deployed on this stack")
    return DeployConfig.load(history[i][1])


def _choices(labels: list[str], current: str) -> str:
    earlier = sorted({v for v in labels if v != current})
    return "deployed before: " + ", ".join(earlier) if earlier else "no other version was deployed"


def fresh_version(run_dir: str | Path, current: str) -> str:
    """The label a new version gets: the next after `current` that this stack has not deployed yet, so one label
    never names two configs on the dashboards (v2 rolled back to, then changed: v4, not the v3 it replaced)."""
    used = {v for v, _ in deployed(run_dir)} | {current}
    label = next_version(current)
    while label in used:
        label = next_version(label)
    return label
