"""The data splits of a run as MLflow dataset inputs (what the run page and the compare view list)."""
from __future__ import annotations

import json
from typing import Any

from runner.tracking.base import DataInput

# mlflow is imported where its entities are made, for start-up: `runner validate` reads this package
# without it (~2 s).

DIGEST_LENGTH = 36   # mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE
SOURCE_TYPE = "local"  # what mlflow.data's LocalArtifactDatasetSource calls a folder on this machine


def data_input(*, name: str, sha256: str, source: str, context: str, profile: dict[str, Any]) -> DataInput:
    """A split folder and its fingerprint as a DataInput (the digest cut to what MLflow keeps)."""
    return DataInput(name=name, digest=sha256[:DIGEST_LENGTH], source=source, context=context, profile=profile)


def data_input_from_json(d: dict[str, Any]) -> DataInput:
    return DataInput(name=d["name"], digest=d["digest"], source=d["source"], context=d["context"],
                     profile=d.get("profile", {}))


def mlflow_dataset_input(data: DataInput) -> Any:
    """mlflow.entities.DatasetInput, as mlflow.log_input(MetaDataset(LocalArtifactDatasetSource(folder)),
    context) would build it, with the fingerprint as digest and its counts as profile."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = Dataset(name=data.name, digest=data.digest, source_type=SOURCE_TYPE,
                      source=json.dumps({"uri": data.source}), profile=json.dumps(dict(data.profile)))
    return DatasetInput(dataset=dataset, tags=[InputTag(key=MLFLOW_DATASET_CONTEXT, value=data.context)])
