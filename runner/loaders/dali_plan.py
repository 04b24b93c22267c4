"""What the DALI loader builds for an experiment on this machine: its pipeline graphs checked for the target
device, a hybrid train pipeline's two copies and the files dealt between them, the readers' file lists, and
each pipeline's DALI arguments (read from the data section here, where they are used)."""
from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.load import PipelineSource
from runner.config.sections import HYBRID, DataConfig, HybridConfig, PipelinesConfig
from runner.data.labels import LabelMap
from runner.data.paths import split_dir
from runner.data.scan import filter_suffixes
from runner.data.shardset import find_shard_split, is_shard_split
from runner.data.skips import labelled_file_list, readable_files, write_file_list
from runner.data.splits import scan_split_at, train_label_map
from runner.dsl.check import SHARD_READERS, check_graph
from runner.dsl.checked import OpNode
from runner.dsl.compile import PipelineArgs
from runner.dsl.emit import emit_source
from runner.dsl.parse import parse_pipeline
from runner.errors import ConfigError, display_path
from runner.loaders.affinity import PROCESS_CORES
from runner.loaders.config import LoaderConfig
from runner.loaders.epochs import repeat_indices
from runner.loaders.slots import slot_views
from runner.machine import cpu_cores

if TYPE_CHECKING:
    from runner.dist import Dist
    from runner.dsl.compile import PipelineArgs

# params a pipeline may declare that the runner fills in from the experiment
BOUND_PARAMS = ("data_root",)



def bind_params(source: PipelineSource, data: DataConfig) -> PipelineSource:
    """`data_root` (when the pipeline declares it and the experiment left it, or set it to null) -> the split's folder."""
    params = dict(source.params)
    if "data_root" in params and ("data_root" not in source.explicit_params or params["data_root"] is None):
        params["data_root"] = str(split_dir(data, source.role))
    return dataclasses.replace(source, params=params)


def hybrid_copy(source: PipelineSource) -> PipelineSource:
    """The copy of a hybrid pipeline: its graph with the hybrid's params applied."""
    changed = source.hybrid.params
    return dataclasses.replace(source, params={**source.params, **changed}, hybrid=None,
                               explicit_params=source.explicit_params | frozenset(changed))


def checked_pipelines(cfg: LoaderConfig, target: Dist, roles: tuple[str, ...] | None = None,
                      epoch: int | None = None) -> dict:
    """role -> CheckedGraph for the experiment's pipelines (all of them, or `roles`); a hybrid train pipeline
    adds its copy under HYBRID. With `epoch` and data.repeats, the train reader reads that epoch's own file list."""
    graphs: dict = {}
    place = dict(rank=target.rank, world=target.world, seed=cfg.seed)
    labels = train_label_map(cfg.data, cfg.at)
    for role, source in cfg.sources.items():
        if roles is not None and role not in roles:
            continue
        graph = parse_pipeline(bind_params(source, cfg.data))
        # devices are checked as written even on a CPU machine, so a laptop catches GPU placement mistakes
        checked = _check_shape(check_graph(graph, target="gpu", **place), role)
        if source.hybrid is None:
            shards = reader_shards(checked)
            if shards is not None:
                graphs[role] = check_graph(graph, target=target.accelerator, shards=shards, **place)
                continue
            files = reader_file_list(cfg, role, checked, labels)
            if role == "train" and epoch is not None and cfg.data.repeats > 1:
                files = repeat_file_list(cfg, files, target, epoch)
                graphs[role] = check_graph(graph, target=target.accelerator, file_list=files, own_order=True,
                                           **{**place, "rank": 0, "world": 1})
                continue
            graphs[role] = _placed(graph, checked, target, files, place)
            continue
        copy = parse_pipeline(bind_params(hybrid_copy(source), cfg.data))
        copy_checked = _check_shape(check_graph(copy, target="gpu", **place), role)
        base_list, copy_list = hybrid_file_lists(cfg, checked)
        graphs[role] = _placed(graph, checked, target, base_list, place)
        graphs[HYBRID] = _placed(copy, copy_checked, target, copy_list, place)
    return graphs


def _placed(graph, as_written, target: Dist, files: str | None, place: dict):
    """The graph checked for this machine: `as_written` (the GPU check) unless the CPU or a file list changes it."""
    if target.accelerator == "cpu" or files:
        return check_graph(graph, target=target.accelerator, file_list=files, **place)
    return as_written


def _check_shape(checked, role: str):
    graph = checked.graph
    if len(checked.outputs) != 2:
        raise ConfigError(f"the {role} pipeline returns {len(checked.outputs)} stream(s); the trainer takes two: "
                          "images (float, CHW) and labels, as in `outputs: [images, labels]`.",
                          file=graph.file, line=graph.outputs_line, where="outputs")
    if checked.reader_name is None:
        raise ConfigError(f"the {role} pipeline has no reader (readers.file, readers.numpy, ...); an epoch is "
                          "defined by its reader.", file=graph.file, where=f"{role} pipeline")
    return checked


def hybrid_batches(data: DataConfig, hybrid: HybridConfig) -> tuple[int, int]:
    """(base, copy): how many images of each training batch each copy of a hybrid train pipeline makes."""
    copy = round(data.batch_size * hybrid.share)
    return data.batch_size - copy, copy


def check_hybrid_batches(cfg: LoaderConfig) -> tuple[int, int]:
    """hybrid_batches, or a ConfigError at pipelines.train.hybrid.share when one copy would make no image."""
    batch, share = cfg.data.batch_size, cfg.sources["train"].hybrid.share
    base, copy = hybrid_batches(cfg.data, cfg.sources["train"].hybrid)
    if not 0 < copy < batch:
        raise ConfigError(f"{share:g} of a batch of {batch} (data.batch_size) is {copy} image(s), so one copy of the "
                          f"pipeline would make none; choose a share between {1 / batch:.3g} and {1 - 1 / batch:.3g}.",
                          **cfg.at("pipelines.train.hybrid.share"))
    return base, copy


def _first_operator(graph):
    """The operator of a checked graph's first step (its reader), or None when that step is arithmetic."""
    node = graph.steps[0].node if graph.steps else None
    return node if isinstance(node, OpNode) else None


def hybrid_file_lists(cfg: LoaderConfig, graph) -> tuple[str | None, str | None]:
    """The split's files dealt between the two copies in proportion to their part of each batch, at random (the
    experiment's seed) or by size (hybrid.deal), as two reader file lists; (None, None) while the split does not
    exist yet."""
    reader = _first_operator(graph)
    given = dict(reader.kwargs) if reader is not None else {}
    if reader is None or reader.op.name != "readers.file" or "file_root" not in given or "file_list" in given \
            or "files" in given:
        raise ConfigError("a hybrid pipeline deals the split's files between its two copies, so its reader must be "
                          "readers.file(file_root=...) without file_list or files.",
                          **cfg.at("pipelines.train.hybrid"))
    base, copy = check_hybrid_batches(cfg)
    folder = split_dir(cfg.data, "train")
    if not folder.is_dir():
        return None, None
    files = readable_files(folder, reader_suffixes(graph), keep_skipped=not cfg.data.skip_bad_files)
    order = list(range(len(files)))
    random.Random(cfg.seed).shuffle(order)
    deal = cfg.sources["train"].hybrid.deal
    if deal != "random":  # decode time grows with the file: hand the cheap (or dear) ones to the copy
        order.sort(key=lambda i: (folder / files[i][0]).stat().st_size, reverse=deal == "smallest")
    cut = round(len(files) * base / (base + copy))
    parts = (sorted(order[:cut]), sorted(order[cut:]))
    return tuple(str(write_file_list(folder, [files[i] for i in part], tag)) for part, tag in zip(parts, ("a", "b")))


def reader_suffixes(graph) -> tuple[str, ...]:
    """The file endings a checked graph's first reader reads (its file_filters, or DALI's defaults; the defaults
    too for no graph, as for a loader other than DALI's)."""
    reader = _first_operator(graph) if graph is not None else None
    filters = dict(reader.kwargs).get("file_filters") if reader is not None else None
    return filter_suffixes(filters.value if filters is not None else None)


def reader_shards(graph) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(shards, indexes) for a readers.webdataset (readers.tfrecord) whose `paths` (`path`) names one folder of
    `runner data shard`'s shards; None for other readers and paths (a list of files is read as written)."""
    reader = _first_operator(graph)
    if reader is None or reader.op.name not in SHARD_READERS:
        return None
    op = reader.op.name
    paths = getattr(dict(reader.kwargs).get(SHARD_READERS[op][0]), "value", None)
    if isinstance(paths, (list, tuple)) and len(paths) == 1:
        paths = paths[0]
    if not isinstance(paths, str) or not Path(paths).is_dir():
        return None
    split = find_shard_split(paths)
    if split is None:
        graph = graph.graph
        raise ConfigError(f"{op}'s {SHARD_READERS[op][0]} names the folder {paths}, which holds no shards that `runner "
                          "data shard` wrote (no .runner-shards.json in it or above it). Write them with `runner data "
                          "shard SRC DST` and set data.root=DST, or read this folder with a readers.file pipeline "
                          "(imagenet_train, imagenet_eval).", file=graph.file, where=f"{graph.name} pipeline")
    if split.format != {"readers.webdataset": "webdataset", "readers.tfrecord": "tfrecord"}[op]:
        graph = graph.graph
        raise ConfigError(f"{paths} holds {split.format} shards, which {op} does not read: use the "
                          f"imagenet_*_{'wds' if split.format == 'webdataset' else 'tfrecord'} pipelines.",
                          file=graph.file, where=f"{graph.name} pipeline")
    return tuple(str(p) for p in split.shards), tuple(str(p) for p in split.indexes)


def reader_file_list(cfg: LoaderConfig, role: str, graph, labels: LabelMap | None) -> str | None:
    """The `file_list` a readers.file(file_root=...) reader gets in place of numbering the folder's classes by
    position: its files labelled by class name from the train split's map (`labels`), without the skip-listed
    ones when data.skip_bad_files (see data.skips). None for other readers, or while the data is not there."""
    reader = _first_operator(graph)
    if labels is None or reader is None or reader.op.name != "readers.file":
        return None
    given = dict(reader.kwargs)
    root = given.get("file_root")
    if root is None or {"files", "file_list"} & set(given) or not isinstance(getattr(root, "value", None), str):
        return None
    folder = Path(root.value)
    if not folder.is_dir():
        return None  # the reader names it when it starts

    if is_shard_split(folder):
        raise ConfigError(f"{folder} holds WebDataset shards (`runner data shard`), but the {role} pipeline reads "
                          "files with readers.file. Read them with a readers.webdataset pipeline: "
                          f"pipelines.{role}.use=imagenet_{role}_wds.", **cfg.at(f"pipelines.{role}"))

    scan = scan_split_at(cfg.data, role, folder, reader_suffixes(graph), num_classes=cfg.num_classes, at=cfg.at)
    path, _ = labelled_file_list(scan, labels, keep_skipped=not cfg.data.skip_bad_files, at=cfg.at("data.root"))
    return str(path)


def repeat_file_list(cfg: LoaderConfig, files: str | None, target: Dist, epoch: int) -> str:
    """This rank's file list of `epoch` under data.repeats, in the order to read it (loaders.epochs.repeat_indices
    over the labelled split `files`). The lists this process wrote for its other epochs are removed: DALI reads a
    list when it builds the reader, and ImageNet's are megabytes each."""
    if files is None:
        raise ConfigError("repeated augmentation deals the train split's files to the processes each epoch, so the "
                          "train pipeline's reader must be readers.file(file_root=$data_root) without files or "
                          "file_list, over a split that exists.", **cfg.at("data.repeats"))
    entries = [line.rsplit(" ", 1) for line in Path(files).read_bytes().decode("utf-8", "surrogateescape").splitlines()]
    order = repeat_indices(len(entries), cfg.data.repeats, target.rank, target.world, cfg.seed, epoch)
    tag = f"repeats-p{os.getpid()}-r{target.rank}"
    out = write_file_list(split_dir(cfg.data, "train"), [(entries[i][0], int(entries[i][1])) for i in order],
                          f"{tag}-e{epoch}")
    for old in out.parent.glob(f"*-{tag}-e*"):
        if old != out:
            old.unlink(missing_ok=True)
    return str(out)


def dali_threads(data: DataConfig, target: Dist) -> int:
    """data.num_threads, or ~75% of this process's share of the cores (a common rule of thumb), or with
    data.reserved_cores every core of the share not reserved; auto is split between the process's reader slots."""
    if data.num_threads != "auto":
        return int(data.num_threads)
    slots = max(1, target.slots)  # gradient accumulation: one pipeline per slot, all in this process
    if data.reserved_cores:
        return max(1, (len(PROCESS_CORES) // max(1, target.local_world) - data.reserved_cores) // slots)
    return max(1, int(cpu_cores() / max(1, target.local_world) / slots * 0.75))


def dali_seed(seed: int, rank: int, role: str) -> int:
    """A pipeline's seed: ranks draw different augmentations; readers get the shared seed (see dsl.check)."""
    return seed + 1000 * rank + {"train": 0, "eval": 17, HYBRID: 29}[role]


def pipeline_args(data: DataConfig, pipelines: PipelinesConfig, role: str, target: Dist, seed: int, *,
                  checkpointing: bool = False) -> PipelineArgs:
    """DALI's Pipeline arguments for `role`: train, eval or HYBRID (the hybrid train pipeline's copy)."""
    batch = data.batch_size if role == "train" else (data.eval_batch_size or data.batch_size)
    threads = dali_threads(data, target)
    hybrid = pipelines.train.hybrid
    if hybrid is not None and role in ("train", HYBRID):
        batch = hybrid_batches(data, hybrid)[role == HYBRID]
        if role == HYBRID and hybrid.num_threads != "auto":
            threads = int(hybrid.num_threads)
    return PipelineArgs(batch_size=batch, num_threads=threads,
                        device_id=target.local_rank if target.accelerator == "gpu" else None,
                        seed=dali_seed(seed, target.rank, role),
                        prefetch_queue_depth=data.prefetch, enable_checkpointing=checkpointing,
                        set_affinity=data.reserved_cores > 0)


def compiled_source(v, role: str) -> str:
    """The role's pipeline (a runner.run.validate.Validated experiment's) as runnable DALI Python."""
    cfg = v.config
    if cfg.data.loader != "dali":
        raise ConfigError(f"data.loader is '{cfg.data.loader}': this experiment has no DALI pipeline to "
                          "compile. Set data.loader=dali.", **v.loaded.at("data.loader"))
    if role not in v.graphs:
        raise ConfigError(f"the experiment has no {role} pipeline (pipelines.{role} is not set).",
                          file=v.loaded.path, where=f"pipelines.{role}")
    origin = display_path(v.loaded.path) + (f" with {' '.join(v.loaded.overrides)}" if v.loaded.overrides else "")
    target, graph = v.target, v.graphs[role]
    if role != "eval" and v.accumulation > 1:  # each reader slot is a shard of processes x accumulation: slot 0's

        target = slot_views(v.target, v.accumulation)[0]
        graph = checked_pipelines(v.loaders, target, roles=("train",))[role]
    return emit_source(graph, pipeline_args(cfg.data, cfg.pipelines, role, target, cfg.seed), origin=origin)
