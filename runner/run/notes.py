"""What a validated experiment runs differently from how it reads, said once."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner import console


def run_notes(notes: Sequence[str], graphs: Mapping[str, Any]) -> None:
    """Say once what a validated experiment runs differently from how it reads: its `notes` (a schedule that never
    leaves its warm-up or never decays, ...), and of its checked `graphs`, deprecated DALI names and GPU steps placed
    on the CPU."""
    for note in notes:
        console.note(note)
    renamed = dict(pair for g in graphs.values() for pair in g.renamed)
    if renamed:
        console.note("DALI has deprecated " + ", ".join(
            f"fn.{old} (now fn.{new})" if new != old else f"fn.{old} (no replacement named; it still runs)"
            for old, new in renamed.items()) + "; the pipelines are compiled with the current names.")
    moved = {role: g.moved_to_cpu for role, g in graphs.items() if g.moved_to_cpu}
    if moved:
        where = "; ".join(f"{role} steps {', '.join(map(str, steps))}" for role, steps in moved.items())
        console.note(f"no GPU here: pipelines are compiled for the CPU ({where} moved from mixed/gpu to cpu, "
                     ".gpu() dropped).")


def label_notes(notes: Sequence[str]) -> None:
    """Say once what the eval split or model.num_classes leave out of the train split's label map."""
    for text in notes:
        console.note(text)
