"""Everything `runner validate` checks, without running anything: config, names, machine, pipelines."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from runner.config.load import LoadedExperiment, load_experiment, schedule_notes
from runner.data.eval_splits import check_split_names
from runner.data.labels import LabelMap
from runner.data.splits import check_caches, check_labels
from runner.dist import Dist
from runner.loaders.config import LoaderConfig
from runner.loaders.dali_plan import checked_pipelines
from runner.loaders.epochs import check_epoch_plan
from runner.loaders.slots import accumulation_note, check_accumulation
from runner.loaders.transforms import check_transforms
from runner.machine import processes_per_node, resolve_accelerator
from runner.models.zoo import check_model
from runner.optim.optimizers import check_optimizer
from runner.optim.schedules import SCHEDULES
from runner.preview.batches import GridSource
from runner.tracking import resolve_tracking_uri
from runner.weights.checkpoint import fixed_settings
from runner.weights.init import WeightsPlace


@dataclass(frozen=True)
class Validated:
    loaded: LoadedExperiment
    target: Dist                                 # the ranks the run will have (this process: rank 0)
    processes: int
    graphs: dict = field(default_factory=dict)   # role -> CheckedGraph (DALI loader only)
    notes: tuple[str, ...] = ()                  # settings that run as written but may surprise
    labels: LabelMap | None = None               # the train split's class names -> labels (None: not read here)
    label_notes: tuple[str, ...] = ()            # what the eval split or model.num_classes leave out, said once
    accumulation: int = 1                        # batches each process accumulates per optimizer step

    @property
    def config(self):
        return self.loaded.config

    @property
    def loaders(self) -> LoaderConfig:
        """What the loaders read of the experiment."""
        return LoaderConfig.of(self.loaded)

    @property
    def grids(self) -> GridSource:
        """What the grids of this experiment's batches say beside the images."""
        cfg = self.config
        return GridSource(name=cfg.name, seed=cfg.seed, data=cfg.data, pipelines=cfg.pipelines, graphs=self.graphs,
                          classes=self.labels.classes if self.labels is not None else None, locate=self.loaded.locate)

    @property
    def weights_place(self) -> WeightsPlace:
        """Where model.init's run ids are looked up."""
        cfg = self.config
        return WeightsPlace(tracking_uri=cfg.tracking.uri, checkpoint_dir=cfg.trainer.checkpoint_dir,
                            at=self.loaded.at("model.init.source"))

    def fixed_settings(self, world: int) -> dict:
        """The settings a checkpoint of this experiment on `world` processes is shaped by (checkpoint.fixed_settings)."""
        train = self.loaded.pipelines.get("train")
        return fixed_settings(self.config, world, hybrid=train.hybrid if train else None,
                              label_digest=self.labels.digest if self.labels is not None else None)


def check_names(loaded: LoadedExperiment) -> None:
    """Model, optimizer and scheduler names resolve through their registries."""
    cfg = loaded.config
    check_model(cfg.model, loaded.locate)
    check_optimizer(cfg.optimizer, cfg.model.name, loaded.at)
    SCHEDULES.get(cfg.scheduler.name, **loaded.at("scheduler.name"))
    if cfg.tracking.enabled:
        resolve_tracking_uri(cfg.tracking.uri, loaded.at("tracking.uri"))

    check_epoch_plan(loaded)
    if cfg.data.loader == "torchvision":
        check_transforms(cfg.data.torchvision, loaded.locate)


def validate(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
             accelerator: str | None = None, processes: int | None = None, check_pipelines: bool = True) -> Validated:
    """Load and check an experiment for this machine, or for another with `accelerator` and `processes` per node
    (default 1), e.g. a cluster's node; check_pipelines=False reads the DALI pipelines' files without checking them
    against DALI, for work that will not build them."""
    loaded = load_experiment(path, overrides)
    check_names(loaded)
    trainer = loaded.config.trainer
    acc = accelerator or resolve_accelerator(trainer.accelerator, loaded.at("trainer.accelerator"))
    procs = processes_per_node(trainer.devices, acc, loaded.at("trainer.devices")) if accelerator is None \
        else processes or 1
    target = Dist(accelerator=acc, world=procs * trainer.nnodes, local_world=procs)
    accumulation = check_accumulation(loaded, target.world)
    check_caches(loaded)  # before the folders are scanned: a half-built cache has empty class folders
    graphs = checked_pipelines(LoaderConfig.of(loaded), target) if loaded.config.data.loader == "dali" and check_pipelines \
        else {}
    check_split_names(loaded)
    labels, notes = check_labels(loaded)
    return Validated(loaded=loaded, target=target, processes=procs, graphs=graphs, labels=labels,
                     label_notes=tuple(notes), accumulation=accumulation,
                     notes=(*schedule_notes(loaded.config), *accumulation_note(loaded.config, target.world,
                                                                                accumulation)))


def with_data(v: Validated) -> Validated:
    """`v` checked again once launch has made the data it names (the generated set): the label map, its checks
    and the readers' file lists, which validation could not see without the folders."""
    if v.labels is not None or v.config.data.loader == "synthetic":
        return v
    graphs = checked_pipelines(v.loaders, v.target) if v.graphs else v.graphs
    labels, notes = check_labels(v.loaded)
    if labels is None:
        return v
    return dataclasses.replace(v, graphs=graphs, labels=labels, label_notes=tuple(notes))
