"""The files a bench leaves to quote: a CSV of one row per measured configuration (timm's results/benchmark-*.csv
shape) and a markdown table under a header naming the machine, the software and the command, both named by what
was measured: bench-<suite>-<gpu>-torch<version>-dali<version>."""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from runner.bench.report import markdown
from runner.bench.stats import PART_WAIT_KEY, Spread, ratios, spread
from runner.bench.suite import BenchResult, Row
from runner.bench.variants import TRAINING_MODES

# (column, mode, result key): each reported as _median, _min, _max
MEASURED = [("images_per_s", "e2e", "images_per_s"), ("data_wait_share", "e2e", "data_wait_share"),
            ("stream_wait_share", "e2e", "stream_wait_share"),
            ("gpu_util_pct", "e2e", "gpu_util_pct"), ("cpu_busy_pct", "e2e", "cpu_busy_pct"),
            ("train_thread_busy_pct", "e2e", "train_thread_busy_pct"),
            ("train_thread_queued_pct", "e2e", "train_thread_queued_pct"),
            ("loader_images_per_s", "loader", "images_per_s"), ("bare_images_per_s", "bare", "images_per_s"),
            ("beside_images_per_s", "beside", "images_per_s"), ("beside_gpu_util_pct", "beside", "gpu_util_pct"),
            ("beside_loader_images_per_s", "beside", "loader_images_per_s")]
IDENTITY = ["suite", "entry", "loader", "experiment", "overrides", "ceiling", "model", "batch_size", "image_size",
            "precision", "channels_last", "compile", "compile_mode", "accelerator", "warmup", "steps"]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def machine_slug(machine: dict[str, str], cores: int) -> str:
    """'h200' for an NVIDIA H200 (a count before it for several), 'cpu16' on 16 cores without a GPU."""
    model = machine.get("gpu.model")
    if not model:
        return f"cpu{cores}"
    name = slug(re.sub(r"(?i)\bnvidia\b|\bgeforce\b", "", model))
    count = int(machine.get("gpu.count", "1"))
    return f"{count}x{name}" if count > 1 else name


def software_slug(software: dict[str, str]) -> str:
    """'torch2.14.1-dali2.4.0': versions without their local part (+cu130); no DALI part where it is absent."""
    parts = [f"torch{software['version.torch'].split('+')[0]}"] if "version.torch" in software else []
    if "version.dali" in software:
        parts.append(f"dali{software['version.dali'].split()[0]}")
    return "-".join(parts)


def file_stem(result: BenchResult, cores: int) -> str:
    what = result.suite if result.suite is not None else Path(result.experiment).stem
    return "-".join(p for p in ("bench", slug(what), machine_slug(result.machine, cores),
                                software_slug(result.software)) if p)


def _ceiling_name(result: BenchResult, r: Row) -> str:
    return "" if r.is_ceiling or not r.ceiling else r.ceiling


def csv_text(result: BenchResult) -> str:
    """One line per (row, mode) measured: what identifies it, then n and each number's median, min and max."""
    buf = io.StringIO()
    # a hybrid's wait per pipeline: a column for each pipeline any row has (train, train.hybrid)
    parts = list(dict.fromkeys(name for r in result.rows for name in r.waited_pipelines()))
    measured = [*MEASURED, *[(f"data_wait_share_{name}", "e2e", PART_WAIT_KEY + name) for name in parts]]
    cols = [*IDENTITY, "mode", "n", "rounds", *[f"{c}_{s}" for c, _, _ in measured for s in ("median", "min", "max")],
            *[f"ceiling_share_{s}" for s in ("median", "min", "max")],
            *[f"runner_over_bare_{s}" for s in ("median", "min", "max")], "errors"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in result.rows:
        for mode in r.runs:
            s = r.settings
            ident = [result.suite or "", r.entry, r.variant, r.experiment, " ".join(r.overrides),
                     _ceiling_name(result, r), s.get("model"), s.get("batch"), s.get("image"), s.get("precision"),
                     s.get("channels_last"), s.get("compile"), s.get("compile_mode") or "", s.get("accelerator"),
                     result.settings.get("warmup"), result.settings.get("steps")]
            n = sum(1 for x in r.runs[mode] if x)
            values = []
            for _, m, key in measured:
                values += _three(r.stat(m, key) if m == mode else None)
            e2e = mode == "e2e"
            # the share of the ceiling of what this line measured: training end to end, or beside the loader
            values += _three(result.share(r, mode) if mode in TRAINING_MODES and not r.is_ceiling else None)
            values += _three(spread(ratios(r.runs.get("e2e", []), r.runs.get("bare", []))) if e2e else None)
            w.writerow([*ident, mode, n, result.repeat, *values, r.errors.get(mode, "")])
    return buf.getvalue()


def _three(s: Spread | None) -> list:
    return ["", "", ""] if s is None else [_round(s.median), _round(s.low), _round(s.high)]


def _round(x: float) -> float:
    return round(x, 6) if abs(x) < 10 else round(x, 1)


def header(result: BenchResult) -> str:
    """Machine, software, date, settings and the command line, above the table."""
    m, sw = result.machine, result.software
    gpu = m.get("gpu.model")
    machine = (f"{m.get('gpu.count', '1')} x {gpu}, {m.get('gpu.memory_gib', '?')} GiB, driver {m.get('gpu.driver', '?')}; "
               if gpu else "no GPU; ") + f"CPU {m.get('cpu', '?')}"
    cuda = sw.get("version.torch_cuda")
    software = ", ".join(p for p in (
        f"torch {sw.get('version.torch', '?')}" + (f" (CUDA {cuda})" if cuda and cuda != "None" else ""),
        f"DALI {sw['version.dali']}" if "version.dali" in sw else "DALI not installed",
        f"Python {sw.get('python', '?')}",
        "runner " + (sw.get("git.commit", "?")[:12] + (" with uncommitted changes" if sw.get("git.dirty") == "true"
                                                        else "") if sw.get("git.commit") else "outside git")) if p)
    st = result.settings
    rounds = (f"{result.repeat} rounds, each measuring every row once; numbers are the median (min-max) of the "
              "rounds, a share of the ceiling the median of each round's ratio to that round's ceiling"
              if result.repeat > 1 else "one run per row")
    what = f"suite {result.suite}" if result.suite is not None else Path(result.experiment).name
    return "\n".join([
        f"### bench: {what} on {gpu or 'CPU'}", "",
        f"- machine: {machine}",
        f"- software: {software}",
        f"- date: {result.started}",
        f"- measured: {st.get('steps')} steps after {st.get('warmup')} warm-up, metrics every {st.get('window')} "
        f"steps; {rounds}",
        f"- command: `{result.command}`"])


def write_results(result: BenchResult, out_dir: Path, cores: int) -> tuple[Path, Path]:
    """<stem>.csv and <stem>.md in out_dir."""
    stem = file_stem(result, cores)
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    csv_path.write_text(csv_text(result))
    md_path.write_text(header(result) + "\n\n" + markdown(result) + "\n")
    return csv_path, md_path
