"""The compiled DALI pipeline behind DALI's PyTorch iterator.

Epochs come from the reader (`reader_name`), with LastBatchPolicy.PARTIAL and padded shards, so
each rank sees its shard exactly once. For training we stop after the last *full* batch that
every rank has and drain the rest of the epoch ourselves: DALI 2.4's DROP policy, combined with
padded shards, replays padding samples at the start of the next epoch (seen here, see
docs/design.md), and equal step counts across ranks are what DDP needs anyway.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch

from runner.errors import DataError
from runner.plan import Target, checked_pipelines, pipeline_args


class DaliLoader:
    def __init__(self, iterator, role: str, reader_name: str, batch: int, target: Target, device: torch.device):
        self.it, self.role, self.device = iterator, role, device
        meta = iterator._pipes[0].reader_meta(reader_name)
        total, world, rank = meta["epoch_size"], target.world, target.rank
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
            self.samples_per_epoch = self.steps_per_epoch * batch
        else:
            self.steps_per_epoch = -(-own // batch)
            self.samples_per_epoch = own
        self.total_samples = total

    @classmethod
    def create(cls, v, role: str, target: Target, device: torch.device, *, state: Any = None,
               checkpointing: bool = False) -> "DaliLoader | None":
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        from runner.dsl.compile import build_pipeline

        graphs = checked_pipelines(v.loaded, target)
        if role not in graphs:
            return None
        graph = graphs[role]
        args = pipeline_args(v.loaded, role, target, checkpointing=checkpointing or state is not None)
        if state is not None:
            args = dataclasses.replace(args, checkpoint=state)
        pipe = build_pipeline(graph, args)
        iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name=graph.reader_name,
                                       last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=False)
        return cls(iterator, role, graph.reader_name, args.batch_size, target, device)

    def epoch(self, start_batch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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
