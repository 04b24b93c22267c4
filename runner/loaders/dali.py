"""The compiled DALI pipeline behind DALI's PyTorch iterator.

Epochs come from the reader (`reader_name`), with LastBatchPolicy.PARTIAL and padded shards, so
each rank sees its shard exactly once. For training we stop after the last *full* batch that
every rank has and drain the rest of the epoch ourselves: DALI 2.4's DROP policy, combined with
padded shards, replays padding samples at the start of the next epoch (seen here, see
docs/pipelines.md), and equal step counts across ranks are what DDP needs anyway.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from runner.config.sections import HYBRID, DataConfig, PipelinesConfig
from runner.data.paths import split_dir
from runner.data.scan import check_images
from runner.data.skips import save_skip_list
from runner.dist import Dist
from runner.dsl.compile import build_pipeline, dali_reason
from runner.errors import ConfigError, DataError, display_path
from runner.loaders import affinity
from runner.loaders.dali_plan import pipeline_args

if TYPE_CHECKING:
    from runner.dsl.compile import PipelineArgs

# DALI's PyTorch plugin is imported where an iterator is made: every loader's module imports this one, and a
# torchvision run goes without DALI.


class DaliLoader:
    """One DALI pipeline, or for a hybrid train pipeline (pipelines.train.hybrid) two, whose batches are
    concatenated: [base part | copy part]."""

    def __init__(self, iterators: list, role: str, totals: list[int], batches: list[int], target: Dist,
                 folder=None, parts: list[str] | None = None, graphs: list | None = None, feeds_model: bool = True,
                 sharded: bool = True):
        """`totals`: the samples each reader lists, over all shards (its epoch_size), or this rank's alone when not
        `sharded` (a file list of its own, data.repeats); `parts`: the pipelines' names;
        `graphs`: their parsed graphs (runner.dsl.graph.Graph), which errors about their outputs point at;
        `feeds_model`: the images go to a model, so they must be floating point (N, C, H, W) (check_model_images)."""
        self.its, self.role, self.device, self.folder = iterators, role, target.device, folder
        self.parts = parts or [role]
        self.graphs = graphs or [None] * len(iterators)
        self.feeds_model = feeds_model
        self.wait_s = [0.0] * len(iterators)  # seconds next() blocked on each pipeline, in all
        world, rank = (target.world, target.rank) if sharded else (1, 0)
        if sum(totals) == 0:
            raise DataError(f"the {role} pipeline's reader found no files.")
        # DALI's shard r holds samples [floor(N*r/W), floor(N*(r+1)/W)): sizes differ by at most one
        if role == "train":
            self.steps_per_epoch = min((total // world) // batch for total, batch in zip(totals, batches))
            if self.steps_per_epoch == 0:
                raise DataError(f"the training set has {sum(totals)} samples: fewer than one batch of {sum(batches)} "
                                f"per process ({world} processes). Lower data.batch_size or add data.")
        else:
            own = totals[0] * (rank + 1) // world - totals[0] * rank // world
            self.steps_per_epoch = -(-own // batches[0])

    @classmethod
    def create(cls, data: DataConfig, pipelines: PipelinesConfig, graphs: dict, role: str, target: Dist, *,
               seed: int, at: Callable[[str], dict], state: Any = None,
               checkpointing: bool = False, parts: tuple[str, ...] | None = None,
               feeds_model: bool = True, sharded: bool = True) -> DaliLoader:
        """`graphs`: the role's checked graphs (dali_plan.checked_pipelines), with a hybrid's copy under HYBRID;
        `at`: the error location of an experiment key (LoadedExperiment.at), for errors about data keys;
        `parts`: the pipelines to build (default: the role's, and a hybrid's copy), e.g. (HYBRID,) for the copy alone;
        `feeds_model`: False for a look at the pipeline's output (preview, loader-only timing): any images pass."""
        parts = list(parts or [role] + ([HYBRID] if role == "train" and HYBRID in graphs else []))
        states = state if isinstance(state, list) else [state] * len(parts)
        folder = split_dir(data, role)
        built = []
        for part, part_state in zip(parts, states):
            args = pipeline_args(data, pipelines, part, target, seed,
                                 checkpointing=checkpointing or part_state is not None)
            if part_state is not None:
                args = dataclasses.replace(args, checkpoint=part_state)
            built.append(_iterator(data, graphs[part], args, target, folder, at))
        return cls([it for it, _, _ in built], role, [t for _, t, _ in built], [b for _, _, b in built], target,
                   folder=folder, parts=parts, graphs=[graphs[part].graph for part in parts], feeds_model=feeds_model,
                   sharded=sharded)

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        try:
            yield from self._epoch(start_batch)
        except RuntimeError as e:
            raise_for_decode(e, self.role, self.folder)

    def part_waits(self) -> dict[str, float]:
        """Seconds spent waiting for each pipeline of a hybrid (its base, then its copy, in the order they are read);
        {} for a single pipeline, whose wait is the loop's data wait."""
        return dict(zip(self.parts, self.wait_s)) if len(self.its) > 1 else {}

    def _batches(self) -> Iterator[list]:
        """Every pipeline's next outputs (None from one that has ended) until all have ended, like zip_longest,
        timing each next(): the base's wait, then what the copy adds."""
        ended = [False] * len(self.its)
        while True:
            outputs = []
            for i, it in enumerate(self.its):
                t0 = time.perf_counter()
                out = None if ended[i] else next(it, None)
                self.wait_s[i] += time.perf_counter() - t0
                ended[i] = out is None
                outputs.append(out)
            if all(ended):
                return
            yield outputs

    def _epoch(self, start_batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yielded = start_batch
        for outputs in self._batches():
            if self.role == "train" and yielded >= self.steps_per_epoch:
                continue  # drain the remainder so the reader ends the epoch where DALI expects
            images = [out[0]["images"] for out in outputs]
            labels = [out[0]["labels"] for out in outputs]
            if images[0].shape[0] == 0:
                continue  # a padded shard's empty tail (eval)
            if self.feeds_model:
                for part_images, part, graph in zip(images, self.parts, self.graphs):
                    check_model_images(part_images, part, graph)
            images = [as_nchw(part_images) for part_images in images]
            yielded += 1
            images, labels = (images[0], labels[0]) if len(images) == 1 else (torch.cat(images), torch.cat(labels))
            yield (images.to(self.device, non_blocking=True),
                   labels.reshape(-1).to(self.device, torch.int64, non_blocking=True))
        for it in self.its:
            it.reset()

    def state(self) -> Any:
        if not self.its[0]._enable_checkpointing:
            return None
        states = [it.checkpoints()[0] for it in self.its]
        return states[0] if len(states) == 1 else states

    def close(self) -> None:
        self.its = []


def _channels_last(images: torch.Tensor) -> bool:
    """(N, H, W, C), told from (N, C, H, W) by the shape: images have at most 4 channels and sides longer than 4 px."""
    return images.ndim == 4 and images.shape[3] <= 4 < min(images.shape[1:3])


def _channels_first(images: torch.Tensor) -> bool:
    return images.ndim == 4 and images.shape[1] <= 4 < min(images.shape[2:])


def as_nchw(images: torch.Tensor) -> torch.Tensor:
    """A pipeline's batch of images as (N, C, H, W). Channels-last images (output_layout="HWC", as NVIDIA's
    channels-last examples write them, or decoded images before normalization) are permuted, not copied, so they
    arrive in torch.channels_last memory format; any other output is left as it is."""
    return images.permute(0, 3, 1, 2) if _channels_last(images) else images


def check_model_images(images: torch.Tensor, part: str, graph=None) -> None:
    """A ConfigError at the pipeline's outputs unless its images, as the pipeline makes them, are what a model takes."""
    if images.is_floating_point() and (_channels_first(images) or _channels_last(images)):
        return
    shape = list(images.shape)
    raise ConfigError(f"the {part} pipeline's images are {images.dtype} of shape {shape}; the trainer takes "
                      "floating-point images with the channels first (N, C, H, W) or last (N, H, W, C), at most 4 "
                      "channels and sides longer than 4 px. End the pipeline with crop_mirror_normalize(..., "
                      'dtype=FLOAT, output_layout="CHW") (or "HWC", or dtype=FLOAT16), as the shipped pipelines do.',
                      file=getattr(graph, "file", None), line=getattr(graph, "outputs_line", None), where="outputs")


def _iterator(data: DataConfig, graph, args: PipelineArgs, target: Dist, folder, at: Callable[[str], dict]):
    """DALI's PyTorch iterator over one compiled pipeline: (iterator, reader epoch size, batch size)."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy


    reserved = data.reserved_cores
    if reserved:
        training, dali = affinity.core_split(reserved, target.local_rank, target.local_world,
                                             at("data.reserved_cores"))
        affinity.pin_dali_threads(dali, args.num_threads)
    before = affinity.thread_ids()
    pipe = build_pipeline(graph, args)
    if reserved:
        affinity.pin_this_thread(training)
    try:  # the iterator runs the pipeline once already, to prepare the first batch
        iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name=graph.reader_name,
                                       last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=False)
    except RuntimeError as e:
        raise_for_decode(e, graph.graph.role, folder)
    if data.dali_nice:  # the native threads this pipeline started: DALI's, and its decoders' (nvImageCodec)
        python_threads = {t.native_id for t in threading.enumerate()}
        affinity.renice_threads(affinity.thread_ids() - before - python_threads, data.dali_nice)
    return iterator, pipe.reader_meta(graph.reader_name)["epoch_size"], args.batch_size


def raise_for_decode(error: RuntimeError, role: str, folder) -> None:
    """Re-raise DALI's error, as a DataError naming the bad files when a decoder failed."""
    text = str(error)
    if folder is None or not ("decoders." in text or "File mapping failed" in text or "Could not open" in text):
        raise error
    raise decode_failure(error, role, folder) from None


def decode_failure(error: Exception, role: str, folder) -> DataError:
    """DALI names no file when a decoder fails: find the files that do not decode and list them to skip."""
    reason = dali_reason(error, 4)
    report = check_images(folder, start_method="spawn")  # forking next to DALI's threads can hang
    if not report.bad:
        return DataError(f"the {role} pipeline failed to decode an image ({reason}), but every file in the folder "
                         "decodes with Pillow; the file may use a format DALI's decoder rejects.", file=folder)
    listed = save_skip_list(report, folder)
    names = "; ".join(f"{i.path} ({i.reason})" for i in report.bad[:5]) + (
        f"; and {len(report.bad) - 5} more" if len(report.bad) > 5 else "")
    return DataError(f"the {role} pipeline failed to decode an image ({reason}). {len(report.bad)} file(s) here do "
                     f"not decode: {names}. They are now listed in {display_path(listed)}, so the next run leaves "
                     "them out: run the same command again.", file=folder)
