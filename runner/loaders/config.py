"""What the loaders read of an experiment, and nothing else: its data section, its pipelines (as the YAML sets
them and as their sources, with the params each role binds), its seed and class count, and where each key was
written, for errors. A run makes it once from the loaded experiment (LoaderConfig.of)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.config.load import LoadedExperiment, PipelineSource
from runner.config.sections import DataConfig, PipelinesConfig
from runner.errors import Locator, error_at


@dataclass(frozen=True)
class LoaderConfig:
    data: DataConfig
    pipelines: PipelinesConfig                  # hybrid, mix, resolution: what the YAML sets around the graphs
    sources: Mapping[str, PipelineSource]       # role -> the pipeline file or steps, with its params
    seed: int
    num_classes: int                            # the synthetic loader's labels; a shard's labels are checked below it
    locate: Locator = lambda key: (None, None)

    @classmethod
    def of(cls, loaded: LoadedExperiment) -> LoaderConfig:
        cfg = loaded.config
        return cls(data=cfg.data, pipelines=cfg.pipelines, sources=loaded.pipelines, seed=cfg.seed,
                   num_classes=cfg.model.num_classes, locate=loaded.locate)

    def at(self, key: str) -> dict[str, Any]:
        """file/line/where keyword arguments for an error about `key`."""
        return error_at(key, self.locate)

    def for_eval_split(self, name: str) -> LoaderConfig:
        """The same loaders reading the eval split `name` (data.eval_splits) in place of data.eval_split."""
        return dataclasses.replace(self, data=dataclasses.replace(self.data, eval_split=name))

    def with_params(self, role: str, params: Mapping[str, Any]) -> LoaderConfig:
        """`role`'s pipeline with `params` set, as if the experiment had written them."""
        source = self.sources[role]
        source = dataclasses.replace(source, params={**source.params, **params},
                                     explicit_params=source.explicit_params | frozenset(params))
        return dataclasses.replace(self, sources={**self.sources, role: source})
