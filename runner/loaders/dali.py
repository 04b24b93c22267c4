"""The compiled DALI pipeline behind DALI's PyTorch iterator.

Epochs come from the reader (`reader_name`), with LastBatchPolicy.PARTIAL and padded shards, so
each rank sees its shard exactly once. For training we stop after the last *full* batch that
every rank has and drain the rest of the epoch ourselves: DALI 2.4's DROP policy, combined with
padded shards, replays padding samples at the start of the next epoch (seen here, see
docs/pipelines.md), and equal step counts across ranks are what DDP needs anyway.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch

from runner.errors import DataError, display_path
from runner.plan import Target, checked_pipelines, pipeline_args, split_dir


class DaliLoader:
    def __init__(self, iterator, role: str, total: int, batch: int, target: Target, device: torch.device,
                 folder=None):
        """`total`: the samples the reader lists, over all shards (its epoch_size)."""
        self.it, self.role, self.device, self.folder = iterator, role, device, folder
        world, rank = target.world, target.rank
        if total == 0:
            raise DataError(f"the {role} pipeline's reader found no files.")
        # DALI's shard r holds samples [floor(N*r/W), floor(N*(r+1)/W)): sizes differ by at most one
        shortest = total // world
        own = total * (rank + 1) // world - total * rank // world
        if role == "train":
            self.steps_per_epoch = shortest // batch
            if self.steps_per_epoch == 0:
                raise DataError(f"the training set has {total} samples: fewer than one batch of {batch} per "
                                f"process ({world} processes). Lower data.batch_size or add data.")
        else:
            self.steps_per_epoch = -(-own // batch)

    @classmethod
    def create(cls, v, role: str, target: Target, device: torch.device, *, state: Any = None,
               checkpointing: bool = False) -> "DaliLoader | None":
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        from runner.dsl.compile import build_pipeline

        graphs = checked_pipelines(v.loaded, target, roles=(role,))
        if role not in graphs:
            return None
        graph = graphs[role]
        args = pipeline_args(v.loaded, role, target, checkpointing=checkpointing or state is not None)
        if state is not None:
            args = dataclasses.replace(args, checkpoint=state)
        pipe = build_pipeline(graph, args)
        folder = split_dir(v.config.data, role)
        try:  # the iterator runs the pipeline once already, to prepare the first batch
            iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name=graph.reader_name,
                                           last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=False)
        except RuntimeError as e:
            raise_for_decode(e, role, folder)
        total = pipe.reader_meta(graph.reader_name)["epoch_size"]
        return cls(iterator, role, total, args.batch_size, target, device, folder=folder)

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        try:
            yield from self._epoch(start_batch)
        except RuntimeError as e:
            raise_for_decode(e, self.role, self.folder)

    def _epoch(self, start_batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yielded = start_batch
        for batch in self.it:
            images, labels = batch[0]["images"], batch[0]["labels"]
            if self.role == "train" and yielded >= self.steps_per_epoch:
                continue  # drain the remainder so the reader ends the epoch where DALI expects
            if images.shape[0] == 0:
                continue  # a padded shard's empty tail (eval)
            yielded += 1
            yield (images.to(self.device, non_blocking=True),
                   labels.reshape(-1).to(self.device, torch.int64, non_blocking=True))
        self.it.reset()

    def state(self) -> Any:
        return self.it.checkpoints()[0] if self.it._enable_checkpointing else None

    def close(self) -> None:
        self.it = None


def raise_for_decode(error: RuntimeError, role: str, folder) -> None:
    """Re-raise DALI's error, as a DataError naming the bad files when a decoder failed."""
    text = str(error)
    if folder is None or not ("decoders." in text or "File mapping failed" in text or "Could not open" in text):
        raise error
    raise decode_failure(error, role, folder) from None


def decode_failure(error: Exception, role: str, folder) -> DataError:
    """DALI names no file when a decoder fails: find the files that do not decode and list them to skip."""
    from runner.data.scan import check_images
    from runner.data.skips import save_skip_list
    from runner.dsl.compile import _first_lines

    reason = _first_lines(error, 4)
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
