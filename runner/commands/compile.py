"""`runner compile`: the pipeline as DALI Python source."""
from __future__ import annotations

from runner.errors import ConfigError, display_path
from runner.plan import pipeline_args
from runner.validate import Validated


def compiled_source(v: Validated, role: str) -> str:
    from runner.dsl.emit import emit_source

    if v.config.data.loader != "dali":
        raise ConfigError(f"data.loader is '{v.config.data.loader}': this experiment has no DALI pipeline to "
                          "compile. Set data.loader=dali.", file=v.loaded.path, where="data.loader")
    if role not in v.graphs:
        raise ConfigError(f"the experiment has no {role} pipeline (pipelines.{role} is not set).",
                          file=v.loaded.path, where=f"pipelines.{role}")
    origin = display_path(v.loaded.path) + (f" with {' '.join(v.loaded.overrides)}" if v.loaded.overrides else "")
    return emit_source(v.graphs[role], pipeline_args(v.loaded, role, v.target), origin=origin)
