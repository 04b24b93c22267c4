"""One training process: join the group, start the run's record, train, record the end, tear down."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict
from typing import Protocol

from runner import console, dist
from runner.config.sections import ModelConfig
from runner.data.labels import LabelMap
from runner.run.data import checked_with_data, ensure_data
from runner.run.processes import WORKER_ENV, torch_threads
from runner.run.record import log_model, log_run_inputs, run_params, split_fingerprints, stale_cache_notes
from runner.run.resume import load_resume
from runner.tracking import create_tracker
from runner.tracking.uri import logged_to
from runner.train.loop import StopRequest, train
from runner.train.summary import print_summary
from runner.weights.init import WeightsPlace, init_note, label_note, plan_init


class RunObserver(Protocol):
    """Told on rank 0 when the run starts afresh and when its end reached the store: a sweep's child keeps its
    parent run up to date this way (runner.sweep.child)."""

    def started(self, uri: str, run_id: str) -> None: ...

    def ended(self, uri: str) -> None: ...


def run_worker(v, *, resume: str | None = None, init=None, observer: RunObserver | None = None) -> int:
    """One training process: join the group, train, record, tear down."""
    d = dist.setup(v.target.accelerator)
    torch_threads(d)
    tracker = None
    try:
        if dist.under_torchrun() and d.local_rank == 0 and WORKER_ENV not in os.environ:
            ensure_data(v, quiet=d.rank != 0)  # started by the user's own torchrun: nobody did it yet
        dist.barrier(d)
        v = checked_with_data(v, quiet=d.rank != 0)
        cfg = v.config
        state = load_resume(resume, cfg.trainer.checkpoint_dir, cfg.name, logged_to(cfg.tracking, v.loaded.at("tracking.uri")),
                            v.fixed_settings(d.world)) if resume else None
        init = prepare_init(v.config.model, v.weights_place, v.labels, d, resumed=state is not None, plan=init)
        run_id = state["run_id"] if state else None

        tracker = create_tracker(v.config.tracking, rank=d.rank, resume_run_id=run_id,
                                 at=v.loaded.at("tracking.uri"))
        if d.main:
            fingerprints = split_fingerprints(v.config.data, v.graphs)
            stale_cache_notes(fingerprints)
            params = {**run_params(v, d.world, fingerprints), **(init.params if init else {})}
            run_id = tracker.start(params) or run_id or uuid.uuid4().hex
            if not state:
                log_run_inputs(v, tracker, d.world, fingerprints)
                if observer is not None:
                    observer.started(tracker.uri, run_id)
        run_id = dist.broadcast_object(run_id, d)
        result = train(v, d, tracker, run_id=run_id, resume=state, init=init)
        if d.main:
            summary = {**asdict(result), "checkpoint": str(result.checkpoint) if result.checkpoint else None}
            tracker.log_text(json.dumps(summary, indent=2, default=str), "summary.json")
            tracker.set_tags({"runner.checkpoint": str(result.checkpoint or "")})
            finished = tracker.finish(result.status)
            if result.status == "FINISHED" and finished.delivered and finished.run_id and v.config.trainer.checkpoint_log:
                log_model(finished.uri, finished.run_id, result.checkpoint, name=v.config.name or v.config.model.name,
                          resolved=v.loaded.resolved, labels=v.labels)
            if finished.delivered and observer is not None:
                observer.ended(finished.uri)
            print_summary(v.config.name or v.loaded.path.stem, result, finished)
        return 0 if result.status == "FINISHED" else 128 + int(result.signal or 15)
    except BaseException as e:
        if tracker is not None:
            tracker.finish("FAILED")
        if d.enabled and dist.peer_failed(e):  # not this rank's fault: the first failure is reported above
            console.err.print(f"rank {d.rank}: stopping: another process of this run failed "
                              f"({str(e).splitlines()[0][:160]}).", markup=False)

            if StopRequest.received is None:  # else torchrun's stop came already: end now
                dist.await_stop()
            return 1
        raise
    finally:
        dist.teardown()


def prepare_init(model: ModelConfig, place: WeightsPlace, labels: LabelMap | None, d, *, resumed: bool, plan=None):
    """model.init planned on every rank (a fetched file is cached: one download); said and logged by rank 0, with
    how its label map compares with the train split's (`labels`). A resume ignores it: the checkpoint holds the
    weights the run had reached."""
    init = model.init
    if init is None:
        return None
    if resumed:
        if d.main:
            console.note(f"model.init ({init.source}) is ignored: --resume continues from the checkpoint's weights.")
        return None
    plan = plan or plan_init(model, place)
    if d.main:
        for text in (init_note(plan, model.name), label_note(plan, labels)):
            if text:
                console.note(text)
    return plan
