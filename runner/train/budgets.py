"""Training budgets read after each evaluation: trainer.stop_at (stop once a metric reaches a value) and
trainer.time_to (wall seconds and epochs until it first reaches each value). The clock is the run's training time
across resumes, evaluations included: a resumed run adds the seconds its checkpoint recorded."""
from __future__ import annotations

from typing import Any

TIME_TO = "time_to/"  # time_to/METRIC/VALUE/seconds and time_to/METRIC/VALUE/epochs


def time_to_key(metric: str, value: float, unit: str) -> str:
    return f"{TIME_TO}{metric}/{value:g}/{unit}"


def reached(value: float, target: float, mode: str) -> bool:
    return value >= target if mode == "max" else value <= target


class Budgets:
    """What trainer.stop_at and trainer.time_to ask for; its state (thresholds already reached, seconds spent
    before a resume) goes into each checkpoint."""

    def __init__(self, tc, state: dict[str, Any] | None = None):
        self.stop_at, self.time_to = tc.stop_at, tc.time_to
        state = state or {}
        self.seconds_before = float(state.get("seconds", 0.0))
        self.reached: set[float] = set(state.get("reached", []))

    def state(self, seconds: float) -> dict[str, Any]:
        """To checkpoint: `seconds` of training in this process so far."""
        return {"seconds": self.seconds_before + seconds, "reached": sorted(self.reached)}

    def after_evaluation(self, metrics: dict[str, float], *, epoch: int, seconds: float) -> tuple[dict[str, float], str | None]:
        """The time-to metrics first reached at this epoch, and why to stop (None: go on). `seconds`: training time
        in this process so far."""
        out: dict[str, float] = {}
        t = self.time_to
        if t is not None and t.metric in metrics:
            for value in t.values:
                if value not in self.reached and reached(metrics[t.metric], value, t.mode):
                    self.reached.add(value)
                    out[time_to_key(t.metric, value, "seconds")] = self.seconds_before + seconds
                    out[time_to_key(t.metric, value, "epochs")] = float(epoch)
        s = self.stop_at
        if s is not None and s.metric in metrics and reached(metrics[s.metric], s.value, s.mode):
            sign = ">=" if s.mode == "max" else "<="
            return out, f"{s.metric} {metrics[s.metric]:.4g} {sign} {s.value:g} at epoch {epoch} (trainer.stop_at)"
        return out, None
