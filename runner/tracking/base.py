"""The Tracker protocol, the null tracker of ranks other than 0, and how a run ended (FinishResult)."""
from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    pass



@dataclass(frozen=True)
class DataInput:
    """One data split a run reads, as MLflow's run page and compare view list it (mlflow.log_input).

    digest: the split's fingerprint (runner.data.scan.fingerprint's sha256, cut to the 36 characters
    MLflow keeps), so runs on the same files share it; profile: the fingerprint's counts.
    """
    name: str
    digest: str
    source: str    # the split folder, absolute
    context: str   # "training" or "eval"
    profile: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": self.digest, "source": self.source, "context": self.context,
                "profile": dict(self.profile)}


@dataclass(frozen=True)
class FinishResult:
    """How a run ended: delivered to the store, or kept in an offline bundle to sync later."""
    run_id: str | None
    status: str
    delivered: bool
    bundle: Path | None = None
    sync_command: str | None = None
    dropped: int = 0  # entries the store rejected or a full buffer could not keep
    uri: str | None = None

    @property
    def message(self) -> str:
        """One line for the run summary ("" when nothing was tracked)."""
        if self.run_id is None:
            return ""
        if self.delivered:
            return f"run {self.run_id} at {self.uri} (runner ui to browse)"
        return f"{self.uri} did not answer; run kept in {shown_path(self.bundle)}. Deliver it with: {self.sync_command}"


class Tracker(Protocol):
    run_id: str | None

    def start(self, params: Mapping[str, Any]) -> str | None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_text(self, text: str, file_name: str) -> None: ...
    def delete_artifact(self, artifact_path: str) -> None: ...
    def log_input(self, data: DataInput) -> None: ...
    def set_tags(self, tags: Mapping[str, Any]) -> None: ...
    def finish(self, status: str = "FINISHED", timeout_s: float = 30.0) -> FinishResult: ...


class NullTracker:
    """Tracks nothing: DDP ranks other than 0, or tracking.enabled: false."""
    run_id: str | None = None

    def start(self, params: Mapping[str, Any]) -> str | None:
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def log_text(self, text: str, file_name: str) -> None:
        pass

    def delete_artifact(self, artifact_path: str) -> None:
        pass

    def log_input(self, data: DataInput) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def finish(self, status: str = "FINISHED", timeout_s: float = 30.0) -> FinishResult:
        return FinishResult(run_id=None, status=status, delivered=True)


def shown_path(path: Path) -> str:
    try:
        return "./" + str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def sync_command(bundle: Path, uri: str) -> str:
    """The command that delivers `bundle` to `uri`."""
    return f"runner tracking sync {shlex.quote(shown_path(bundle))} --uri {shlex.quote(uri)}"
