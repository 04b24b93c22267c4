"""A run on a cache (JPEG or raw) whose source images changed since it was made says so.
tests/unit/data/test_cache.py holds `runner data cache` itself."""
from __future__ import annotations

from PIL import Image

from runner.data.scan import fingerprint
from tests.fixtures.data_cache import COLOURS, MAX_SIDE, ON_THE_JPEG_CACHE
from tests.helpers import run_cli


def test_a_run_on_a_cache_whose_source_changed_since_says_so_for_jpeg_and_raw_caches(src, project, capsys):
    from runner.data.manifest import stale_source_note

    (project / "experiments" / "exp.yaml").write_text(
        ON_THE_JPEG_CACHE + "trainer: {epochs: 1, max_steps: 1, eval_every_n_epochs: 0}\n")
    assert run_cli(["data", "cache", "src", "jpeg", "--format", "jpeg", "--max-side", MAX_SIDE], capsys)[0] == 0
    assert stale_source_note("jpeg/train") is None and stale_source_note("jpeg/val") is None
    before = fingerprint(src / "train")
    Image.new("RGB", (40, 30), COLOURS[1]).save(src / "train" / "c1" / "new.jpg")  # the source grows after caching
    after = fingerprint(src / "train")
    assert stale_source_note("jpeg/val") is None

    assert run_cli(["data", "cache", "src", "raw", "--max-side", MAX_SIDE], capsys)[0] == 0  # after the change
    assert stale_source_note("raw/train") is None
    (src / "train" / "c1" / "new.jpg").unlink()
    assert stale_source_note("raw/train") == (
        f"raw/train is a cache of {(src / 'train').resolve()}, which has changed since it was cached (then 13 files "
        f"in 3 classes, {after['bytes']} bytes; now 12 files in 3 classes, {before['bytes']} bytes). This run reads "
        f"the images as they were then; `runner data cache {src.resolve()} raw --max-side 48` brings the cache up "
        "to date.")
    Image.new("RGB", (40, 30), COLOURS[1]).save(src / "train" / "c1" / "new.jpg")

    code, out, err = run_cli(["launch", "experiments/exp.yaml"], capsys)
    assert code == 0, err
    assert err == (
        f"note: jpeg/train is a cache of {(src / 'train').resolve()}, which has changed since it was cached (then 12 "
        f"files in 3 classes, {before['bytes']} bytes; now 13 files in 3 classes, {after['bytes']} bytes). This run "
        f"reads the images as they were then; `runner data cache {src.resolve()} jpeg --format jpeg --max-side 48 "
        "--quality 90` brings the cache up to date.\n")
