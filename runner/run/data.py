"""The data a run reads, made (the generated set) and checked before any process starts."""
from __future__ import annotations

from runner import console
from runner.config.load import LoadedExperiment
from runner.data.eval_splits import check_eval_splits
from runner.data.paths import synth_dir
from runner.data.splits import check_split_sizes, scan_split
from runner.data.synth import generate_synthetic
from runner.loaders.dali_plan import reader_suffixes
from runner.progress import progress_bar
from runner.run.validate import with_data


def ensure_data(v, *, quiet: bool = False, train: bool = True) -> None:
    """Generate the synthetic set when data.root is unset; check the folders otherwise (train=False: the eval
    splits alone, for runner evaluate)."""
    cfg = v.config.data
    if cfg.loader == "synthetic":
        return
    if cfg.root is None:
        root, s = synth_dir(cfg.synth), cfg.synth
        if not quiet:
            console.note(f"data.root is unset: training on the synthetic ImageNet-like JPEG set in {root} "
                         f"({s.classes} classes x {s.per_class} images; set data.root to use real data).")
        with progress_bar("generating synthetic data") as progress:
            generate_synthetic(root, classes=s.classes, per_class=s.per_class, eval_per_class=s.eval_per_class,
                               min_side=s.min_side, max_side=s.max_side, quality=s.quality,
                               progress=None if quiet else progress)
        check_extra_eval_splits(v.loaded, v.target.world, v.graphs.get("eval"), quiet=quiet)
        return

    suffixes = {}
    for role in ("train", "eval") if train else ("eval",):
        if role == "eval" and v.config.pipelines.eval is None and cfg.loader == "dali":
            continue
        suffixes[role] = reader_suffixes(v.graphs.get(role))
        scan_split(v.loaded, role, suffixes[role])  # DataError at data.root, naming folder and layout
    if train:
        check_split_sizes(v.loaded, v.target.world, suffixes, accumulation=v.accumulation)  # once, not per process
    check_extra_eval_splits(v.loaded, v.target.world, v.graphs.get("eval"), quiet=quiet)


def check_extra_eval_splits(loaded: LoadedExperiment, world: int, eval_graph, *, quiet: bool) -> None:
    """data.eval_splits checked as the eval split is, for `world` processes reading them with `eval_graph` (the
    checked eval pipeline, or None); the classes a split has no folder for, said once."""
    for text in check_eval_splits(loaded, world, reader_suffixes(eval_graph)):
        if not quiet:
            console.note(text)


def checked_with_data(v, *, quiet: bool = False):
    """validate.with_data, saying its notes when it made them (the data was generated after validation)."""
    checked = with_data(v)
    if checked is not v and not quiet:
        for text in checked.label_notes:
            console.note(text)
    return checked
