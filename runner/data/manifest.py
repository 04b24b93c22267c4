"""The manifest of a folder `runner data cache` made, as `runner data fingerprint` and a run's record show it.

A run reads a split (DATA_ROOT/train); the manifest (`.runner-cache.json`) lies in the split itself when
the cache was made from one split, or one folder up when it was made from a folder of splits.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from runner.data.scan import fingerprint
from runner.errors import DataError, counted, display_path, first_names

MARKER = ".runner-cache.json"  # runner.data.cache.MARKER, spelt here so that reading it does not import numpy


def find_manifest(folder: str | Path) -> tuple[Path, dict] | None:
    """(the cache root, its manifest) for a cache root or one of its splits; None for other folders.

    A marker that cannot be read counts as none here (building into that folder reports it)."""
    folder = Path(folder)
    for root in (folder, folder.parent):
        try:
            manifest = json.loads((root / MARKER).read_text())
            dict(manifest["settings"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return root, manifest
    return None


def describe(manifest: dict) -> str:
    """One line: 'JPEG cache, longer side <= 320 px, quality 90 (lanczos, 4:2:0, Pillow 13.0.0 ...)'."""
    s = manifest["settings"]
    state = "" if manifest.get("complete") else " (incomplete: its build did not finish)"
    if s.get("format") == "jpeg":
        return (f"JPEG cache, longer side <= {s['max_side']} px, quality {s['quality']} ({s['filter']} filter, "
                f"{s['subsampling']} chroma, small JPEGs {s['small_jpegs']}; Pillow {s['pillow']}, {s['libjpeg']})"
                + state)
    return f"decoded cache (.npy), longer side <= {s.get('max_side')} px (format {s.get('format')})" + state


def build_options(settings: dict) -> str:
    """The `runner data cache` options that make a cache with these settings (a manifest's, or a run's params)."""
    if str(settings.get("format")) == "jpeg":
        return f"--format jpeg --max-side {settings.get('max_side')} --quality {settings.get('quality')}"
    return f"--max-side {settings.get('max_side')}"


def build_command(root: Path, manifest: dict) -> str:
    """The `runner data cache` command that made (and resumes) the cache at `root`."""
    return f"runner data cache {manifest.get('source')} {display_path(root)} {build_options(manifest['settings'])}"


def cache_problem(folder: str | Path) -> str | None:
    """Why a run must not read `folder`, a cache or one of its splits, as its data: the cache's build did not finish
    (it holds part of its source), or it still holds entries that no source image backs (listed by its last build:
    images removed or moved to another class since, which a run would read under their old class); None for a
    whole cache and for folders that are not caches."""
    found = find_manifest(folder)
    return None if found is None else manifest_problem(*found)


def manifest_problem(root: Path, manifest: dict) -> str | None:
    """cache_problem for the cache at `root`, whose manifest is already read."""
    if not manifest.get("complete"):
        return (f"{display_path(root)} is a cache whose build did not finish, so it holds only part of its source "
                f"{manifest.get('source')}. Run `{build_command(root, manifest)}` again: it continues where it "
                "stopped.")
    listed = (manifest.get("summary") or {}).get("stale") or []
    stale = [name for name in listed if os.path.lexists(root / name.rstrip("/"))]
    if not stale:
        return None
    return (f"{display_path(root)} holds {counted(len(stale), 'entry', 'entries')} for which its last build found no "
            f"image in its source {manifest.get('source')} (removed, or moved to another class, since cached): "
            f"{first_names(stale, 5)}. A run would read each as an image of the class folder it sits in. Remove them "
            f"(paths relative to {display_path(root)}), or build the cache into a new folder.")


def _source_state(manifest: dict, split: str) -> tuple[str, dict | None]:
    """('unchanged' | 'changed' | 'absent' | the reason it is unreadable, its fingerprint now) of a cache's source
    split, where the manifest says it is on this machine."""
    then = (manifest.get("source_fingerprint") or {}).get(split)
    folder = Path(str(manifest.get("source"))) / split
    if then is None or not folder.is_dir():
        return "absent", None
    try:
        now = fingerprint(folder)
    except DataError as e:
        return f"not readable now ({e.message})", None
    return ("unchanged" if now["sha256"] == then.get("sha256") else "changed"), now


def _files(fp: dict) -> str:
    return f"{fp.get('files')} files in {fp.get('classes')} classes, {fp.get('bytes')} bytes"


def source_now(root: Path, manifest: dict, split: str) -> str:
    """Whether a cache's source split, where it is on this machine, still has the fingerprint it had when cached."""
    state, now = _source_state(manifest, split)
    if state == "absent":
        return "not on this machine"
    if state != "changed":
        return state
    return f"changed since (now {_files(now)}): `{build_command(root, manifest)}` brings the cache up to date"


def stale_source_note(folder: str | Path) -> str | None:
    """A note when `folder` (a split a run reads) is a whole cache whose source split, on this machine, has changed
    since it was built; None otherwise."""
    found = find_manifest(folder)
    if found is None or not found[1].get("complete"):
        return None
    root, manifest = found
    split = "" if root == Path(folder) else Path(folder).name
    state, now = _source_state(manifest, split)
    if state != "changed":
        return None
    then = manifest["source_fingerprint"][split]
    return (f"{display_path(Path(folder))} is a cache of {Path(str(manifest.get('source'))) / split}, which has "
            f"changed since it was cached (then {_files(then)}; now {_files(now)}). This run reads the images as "
            f"they were then; `{build_command(root, manifest)}` brings the cache up to date.")


def run_params(role: str, folder: str | Path) -> dict[str, str]:
    """`data.cache.ROLE.*` params for a run that reads `folder`: empty when it is not a cache.

    The settings, the manifest's completeness and, for the split read, the fingerprint of the source it
    was made from, so that a run trained on a compact cache says so and names what it was made from."""
    found = find_manifest(folder)
    if found is None:
        return {}
    root, manifest = found
    out = {f"data.cache.{role}.{k}": str(v) for k, v in manifest["settings"].items()}
    out[f"data.cache.{role}.complete"] = str(bool(manifest.get("complete")))
    out[f"data.cache.{role}.source"] = str(manifest.get("source"))
    split = "" if root == Path(folder) else Path(folder).name
    for k, v in (manifest.get("source_fingerprint") or {}).get(split, {}).items():
        out[f"data.cache.{role}.source_fingerprint.{k}"] = str(v)
    return out


def run_tags(folders: dict[str, Path]) -> dict[str, str]:
    """`data.ROLE_cache` tags (the describe() line; runner.data.ROLE_cache in the run) for roles reading a cache."""
    out = {}
    for role, folder in folders.items():
        found = find_manifest(folder)
        if found:
            out[f"data.{role}_cache"] = describe(found[1])
    return out
