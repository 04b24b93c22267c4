"""What a sweep's child does beyond any launch: at a fresh start, retire its earlier attempts that left nothing to
resume from; at its end, land the sweep's result on the parent run."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from runner.sweep.landing import land_quietly
from runner.sweep.status import CHILD_TAG
from runner.tracking.parent import supersede
from runner.tracking.store import find_runs

log = logging.getLogger("runner.sweep")


def sweep_parent(tags: Mapping[str, str]) -> str | None:
    """The parent run of a sweep child, from its tracking.tags; None for any other run."""
    return tags.get("mlflow.parentRunId") if CHILD_TAG in tags else None


def on_fresh_start(uri: str, run_id: str, tags: Mapping[str, str]) -> None:
    parent = sweep_parent(tags)
    if parent is None or run_id.startswith("local-"):
        return
    try:
        earlier = [r.run_id for r in find_runs(uri, parent=parent, tags={CHILD_TAG: tags[CHILD_TAG]}, limit=1000)
                   if r.run_id != run_id and "runner.sweep.superseded_by" not in r.tags]
        supersede(uri, earlier, by=run_id)
    except Exception as e:  # noqa: BLE001 - bookkeeping: the run itself goes on
        log.warning("earlier attempts of sweep child %s were not marked superseded: %s", tags[CHILD_TAG], e)


def on_end(uri: str, tags: Mapping[str, str]) -> None:
    parent = sweep_parent(tags)
    if parent is not None:
        land_quietly(uri, parent)


@dataclass(frozen=True)
class SweepChild:
    """A sweep child's launch observer (runner.train.worker.RunObserver): its tags name its parent and place."""
    tags: Mapping[str, str]

    def started(self, uri: str, run_id: str) -> None:
        on_fresh_start(uri, run_id, self.tags)

    def ended(self, uri: str) -> None:
        on_end(uri, self.tags)  # the parent run shows the sweep's result so far


def sweep_child(tags: Mapping[str, str]) -> SweepChild | None:
    """The observer a launch of a sweep's child takes; None for any other run."""
    return SweepChild(dict(tags)) if sweep_parent(tags) else None
