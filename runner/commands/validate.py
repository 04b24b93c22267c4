"""`runner validate`: a summary of what the experiment would run."""
from __future__ import annotations

from typing import TYPE_CHECKING

from runner import console
from runner.commands.args import split_overrides
from runner.config.sections import HYBRID
from runner.data.paths import data_root
from runner.errors import RunnerError, display_path
from runner.run.notes import label_notes, run_notes

if TYPE_CHECKING:
    from runner.run.validate import Validated


def register(sub) -> None:
    p = sub.add_parser("validate", help="check experiments (config, names, pipelines) without running")
    p.add_argument("items", nargs="+", metavar="EXPERIMENT|key=value",
                   help="one or more experiment files, then key=value overrides applied to each")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.run.validate import validate

    files, overrides = split_overrides(args.items)
    if not files:
        raise RunnerError("name at least one experiment file, e.g. runner validate experiments/quickstart.yaml.",
                          file="command line")
    checked = [validate(path, overrides) for path in files]  # every file checked before anything prints
    for v in checked:
        run_notes(v.notes, v.graphs)
        label_notes(v.label_notes)
        print_validated(v)
    return 0


def print_validated(v: Validated) -> None:
    cfg = v.config
    root = data_root(cfg.data)
    if cfg.data.loader == "synthetic":
        data = "random tensors on the device (no files)"
    elif cfg.data.root:
        data = f"{cfg.data.root}" + ("" if root.is_dir() else " (not found here)")
    else:
        data = f"synthetic JPEGs in {root}" + (" (generated)" if root.is_dir() else " (generated at launch)")
    from runner.loaders.dali_plan import hybrid_batches
    from runner.loaders.slots import global_batch
    from runner.optim.optimizers import scaled_lr

    batch = global_batch(cfg, v.target.world)
    lr = scaled_lr(cfg.optimizer, batch)
    init = cfg.model.init
    rows = [
        ["model", f"{cfg.model.name} ({cfg.model.num_classes} classes)"
         + "".join(f", {key} {value}" for key, value in cfg.model.kwargs.items())
         + (f", from {init.source}" + (", new head" if init.new_head else "") if init else "")],
        ["optimizer", f"{cfg.optimizer.name}, lr {lr:g}" + (f" ({cfg.optimizer.lr:g} per {cfg.optimizer.lr_reference_batch} "
                                                            f"images, global batch {batch})" if lr != cfg.optimizer.lr
                                                            else "")
         + f", weight decay {cfg.optimizer.weight_decay:g}"
         + ("" if cfg.optimizer.no_decay_on_norm_and_bias else " (norms and biases too)")
         + (f", layer decay {cfg.optimizer.layer_decay:g}" if cfg.optimizer.layer_decay else "")],
        ["schedule", f"{cfg.scheduler.name}, warm-up {cfg.scheduler.warmup_epochs:g} epochs"],
        ["trainer", f"{cfg.trainer.epochs} epochs" + (f", at most {cfg.trainer.max_steps} steps"
                                                         if cfg.trainer.max_steps else "")
         + f", {cfg.trainer.precision}" + (", channels_last" if cfg.trainer.channels_last else "")
         + ((", torch.compile" + (f" ({cfg.trainer.compile_mode})" if cfg.trainer.compile_mode != "default" else ""))
            if cfg.trainer.compile else "")
         + (", high-priority CUDA stream" if cfg.trainer.stream_priority == "high" else "")
         + (f", label smoothing {cfg.trainer.label_smoothing:g}" if cfg.trainer.label_smoothing else "")
         + (f", EMA {cfg.trainer.ema.decay:g}" + (" with warm-up" if cfg.trainer.ema.warmup else "")
            if cfg.trainer.ema else "")
         + _loss_note(cfg.trainer.loss) + (", flip TTA at eval" if cfg.trainer.eval_tta == "flip" else "")
         + _budget_note(cfg.trainer)],
        ["devices", f"{v.processes} x {v.target.accelerator}" + (f" on each of {cfg.trainer.nnodes} nodes"
                                                                 if cfg.trainer.nnodes > 1 else "")],
        ["loader", f"{cfg.data.loader}, batch {cfg.data.batch_size} per process"
         + (f", {v.accumulation} accumulated per step (global batch {batch})" if v.accumulation > 1 else "")],
        ["data", data],
    ]
    if v.labels is not None:
        from runner.data.shardset import LABELS, find_shard_split

        shards = find_shard_split(v.labels.folder)
        source = (f"the map of the shards' labels, {display_path(shards.root / LABELS)}" if shards is not None
                  else f"the class folders of {display_path(v.labels.folder)}")
        rows.append(["labels", f"{len(v.labels)} classes, numbered by {source}; every split is labelled by class "
                               "name"])
    parts = dict(zip(("train", HYBRID), hybrid_batches(cfg.data, cfg.pipelines.train.hybrid))) if HYBRID in v.graphs else {}
    for role, g in v.graphs.items():
        rows.append([f"{role} pipeline", f"{g.graph.name} ({display_path(g.graph.file) if not isinstance(g.graph.file, str) else g.graph.file}): "
                     f"{len(g.steps)} steps -> {', '.join(o.name for o in g.outputs)}; {g.target}"
                     + (", conditionals" if g.conditionals else "")
                     + (f"; {parts[role]} of each batch" if role in parts else "")
                     + (_copy_note(v.loaded.pipelines["train"].hybrid) if role == HYBRID else "")
                     + (_mix_note(cfg.pipelines.train.mix) if role == "train" and cfg.pipelines.train.mix else "")
                     + (_epoch_note(cfg) if role == "train" else "")])
    rows.append(["tracking", (cfg.tracking.uri or "$MLFLOW_TRACKING_URI or ./mlflow.db") + f", experiment "
                 f"'{cfg.tracking.experiment}'" if cfg.tracking.enabled else "off"])
    console.out.print(f"[green]OK[/] {display_path(v.loaded.path)}" +
                      (f" with {' '.join(v.loaded.overrides)}" if v.loaded.overrides else ""))
    console.out.print(console.table(None, ["", ""], rows, justify_numbers=False))


def _loss_note(loss) -> str:
    if loss.name == "cross_entropy":
        return ""
    return ", binary cross entropy" + (f" (targets above {loss.target_threshold:g} count as 1)"
                                       if loss.target_threshold is not None else "")


def _budget_note(tc) -> str:
    note = ""
    if tc.stop_at is not None:
        note += f", stop at {tc.stop_at.metric} {'>=' if tc.stop_at.mode == 'max' else '<='} {tc.stop_at.value:g}"
    if tc.time_to is not None:
        note += f", time to {tc.time_to.metric} {', '.join(f'{x:g}' for x in tc.time_to.values)}"
    return note


def _epoch_note(cfg) -> str:
    r, note = cfg.pipelines.train.resolution, ""
    if r is not None:
        note += f"; {r.param} {r.min}-{r.max} px over epochs {r.start_epoch}-{r.end_epoch}"
    if cfg.data.repeats > 1:
        note += f"; each image {cfg.data.repeats} times an epoch, on different processes"
    return note


def _mix_note(mix) -> str:
    kinds = [f"{name} {alpha:g}" for name, alpha in (("mixup", mix.mixup_alpha), ("CutMix", mix.cutmix_alpha)) if alpha]
    return f"; then {' or '.join(kinds)} on {mix.prob:.0%} of the batches ({mix.mode} mode)"


def _copy_note(hybrid) -> str:
    files = "" if hybrid.deal == "random" else f", from the {hybrid.deal} files"
    return " with " + ", ".join(f"{k}={val}" for k, val in hybrid.params.items()) + files
