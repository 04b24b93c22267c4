"""Experiment configuration: typed sections and the loader that fills them from YAML."""
from runner.config.load import LoadedExperiment, PipelineSource, load_experiment
from runner.config.sections import Experiment

__all__ = ["Experiment", "LoadedExperiment", "PipelineSource", "load_experiment"]
