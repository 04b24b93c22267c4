"""The experiment a run trains, apart from where it is kept: what two runs must share to be the same setting."""
from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

# tracking tags that say what a run *is* (a sweep child, a reproduction), not how it trains:
# a re-run does not inherit them
IDENTITY_TAGS = ("mlflow.parentRunId", "runner.reproduces", "runner.sweep", "runner.sweep.child")
# keys that say where a run is logged and kept, and which node meets the others where, not what it trains
PLACE_KEYS = ("tracking.run_name", "tracking.uri", "trainer.checkpoint_dir", "trainer.node_rank",
              "trainer.rdzv_endpoint", "trainer.rdzv_id")
UNLOGGED_SECTIONS = ("launcher",)  # how `runner sweep` runs children: never a run's param


def as_logged(resolved: dict[str, Any]) -> dict[str, Any]:
    """The resolved experiment as a run logs it (params, experiment.yaml): without the sweep's launcher section."""
    return {k: v for k, v in resolved.items() if k not in UNLOGGED_SECTIONS}


def training_config(resolved: dict[str, Any]) -> dict[str, Any]:
    """The resolved experiment without the keys that say where the run goes (its name, store, checkpoint folder,
    place in a sweep)."""
    out = copy.deepcopy(as_logged(resolved))
    for key in PLACE_KEYS:
        section, _, leaf = key.partition(".")
        (out.get(section) or {}).pop(leaf, None)
    tags = (out.get("tracking") or {}).get("tags") or {}
    for tag in IDENTITY_TAGS:
        tags.pop(tag, None)
    return out


def config_digest(resolved: dict[str, Any]) -> str:
    """sha256 of training_config as canonical JSON: equal for runs of the same setting wherever they are kept."""
    text = json.dumps(training_config(resolved), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
