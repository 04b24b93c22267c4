"""`runner tune`'s verdict on whether decoding limits the best setting, from result tables like the H200 runs'."""
from __future__ import annotations

from pathlib import Path

import pytest

from runner.bench.tune import Trial, decode_limit

DATA = Path("/data/imagenet")


CACHE_ADVICE = ("Store smaller JPEGs once: `runner data cache /data/imagenet /data/imagenet-jpeg320 --format jpeg "
                "--max-side 320 --quality 90`, then train with data.root=/data/imagenet-jpeg320; a 320 px, quality 90 "
                "cache took 0.25x the disk of the benchmark set and fed the compiled ResNet-50 at 99.2% of its ceiling "
                "on an H200 with DALI CPU decode alone, where decoding the full-size JPEGs on CPU threads gave 74-86% "
                "(docs/benchmarks.md).")


def best(wait: float, gpu: float | None, busy: float | None, stream: float | None = None) -> Trial:
    return Trial({"data.num_threads": 14}, result={"images_per_s": 5000.0, "data_wait_share": wait,
                                                   "gpu_util_pct": gpu, "train_thread_busy_pct": busy,
                                                   "stream_wait_share": stream})


@pytest.mark.parametrize("wait, gpu, busy, seen", [
    # CPU decode of every full-size JPEG on the H200 (docs/benchmarks.md, "Eager vs torch.compile"): 27.8% wait, GPU 82.6%
    (0.278, 82.6, 70.0, "data wait 27.8% of the step time, GPU busy 83%, training thread busy 70%"),
    # the hybrid with too large a CPU share: the CPU copy is late though the GPU is nearly full
    (0.118, 92.6, 96.0, "data wait 11.8% of the step time, GPU busy 93%, training thread busy 96%"),
    # the GPU idles while the training thread idles too: waiting for batches, however the wait is counted
    (0.03, 60.0, 40.0, "data wait 3.0% of the step time, GPU busy 60%, training thread busy 40%"),
    # a CPU machine: no GPU numbers, the wait alone
    (0.2, None, None, "data wait 20.0% of the step time"),
])
def test_a_setting_waiting_for_data_names_the_jpeg_cache(wait, gpu, busy, seen):
    assert decode_limit(best(wait, gpu, busy), DATA) == (
        f"the best setting still waits for data ({seen}): the input pipeline is the limit, not the model. {CACHE_ADVICE}")


def test_a_stall_of_the_training_stream_is_waiting_for_data_though_the_host_did_not_wait():
    # the host returned from next() at once, but the stream stood still 9.6% of the time for the pipeline's GPU work
    assert decode_limit(best(0.031, 88.0, 90.0, stream=0.096), DATA) == (
        "the best setting still waits for data (data wait 3.1% of the step time, the training stream's 9.6%, GPU busy "
        f"88%, training thread busy 90%): the input pipeline is the limit, not the model. {CACHE_ADVICE}")
    assert decode_limit(best(0.031, 88.0, 90.0, stream=0.012), DATA) is None  # the stream was fed: not data


def test_the_verdict_says_how_busy_the_host_cpus_were():
    trial = Trial({}, result={"images_per_s": 6375.0, "data_wait_share": 0.082, "gpu_util_pct": 94.0,
                              "cpu_busy_pct": 97.4, "train_thread_busy_pct": 49.0})
    assert decode_limit(trial, DATA) == (
        "the best setting still waits for data (data wait 8.2% of the step time, GPU busy 94%, host CPUs busy 97%, "
        f"training thread busy 49%): the input pipeline is the limit, not the model. {CACHE_ADVICE}")


def test_the_verdict_names_the_pipeline_of_a_hybrid_the_loop_waited_for():
    trial = Trial({}, result={"images_per_s": 6375.0, "data_wait_share": 0.082, "gpu_util_pct": 94.0,
                              "data_wait_share.train": 0.01, "data_wait_share.train.hybrid": 0.072})
    assert decode_limit(trial, DATA).startswith(
        "the best setting still waits for data (data wait 8.2% of the step time (train 1.0%, train.hybrid 7.2%), GPU "
        "busy 94%): the input pipeline is the limit, not the model.")


@pytest.mark.parametrize("wait, gpu, busy", [
    (0.0, 99.0, 98.0),    # the synthetic ceiling: the GPU is the limit
    (0.082, 99.5, 60.0),  # eager CPU decode at 99.2% of the ceiling: the thread waits, but the GPU is full
    (0.036, 74.5, 97.0),  # compiled, GPU 74.5% with the training thread busy: launching the step, not data
    (0.04, None, None),   # a CPU machine under the limit
])
def test_a_setting_the_data_keeps_up_with_gets_no_advice(wait, gpu, busy):
    assert decode_limit(best(wait, gpu, busy), DATA) is None


def test_a_failed_trial_gets_no_advice():
    assert decode_limit(Trial({}, error="boom"), DATA) is None


def test_reading_a_jpeg_cache_already_suggests_a_smaller_one():
    cache = {"source": "/data/imagenet", "settings": {"format": "jpeg", "max_side": 320, "quality": 90}}
    assert decode_limit(best(0.2, 80.0, 50.0), Path("/data/imagenet-jpeg320"), cache) == (
        "the best setting still waits for data (data wait 20.0% of the step time, GPU busy 80%, training thread busy "
        "50%): the input pipeline is the limit, not the model. It already reads a compact JPEG cache (longer side 320 px, "
        "quality 90); a smaller one decodes faster: `runner data cache /data/imagenet DST --format jpeg --max-side 256 "
        "--quality 90`, then data.root=DST.")


def test_small_images_get_more_threads_not_a_cache(tmp_path):
    from PIL import Image

    from runner.data.jpeg_cache import median_longer_side

    for i, side in enumerate((80, 100, 120)):
        (tmp_path / "train" / "a").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (side, 60), (1, 2, 3)).save(tmp_path / "train" / "a" / f"{i}.jpg")
    side = median_longer_side(tmp_path / "train")
    assert side == 100
    assert decode_limit(best(0.2, None, None), tmp_path, None, side) == (
        "the best setting still waits for data (data wait 20.0% of the step time): the input pipeline is the limit, "
        "not the model. The images are small already (median longer side 100 px): a compact JPEG cache would not shrink "
        "them. Give decoding more cores (data.num_threads), or decode on the GPU "
        "(pipelines.train.params.decode_device=mixed).")
    assert decode_limit(best(0.2, None, None), DATA, None, 500).endswith(CACHE_ADVICE)


def test_reading_the_decoded_cache_suggests_the_jpeg_cache():
    cache = {"source": "/data/imagenet", "settings": {"format": 1, "max_side": 256}}
    assert decode_limit(best(0.2, 80.0, 50.0), Path("/data/imagenet-npy"), cache) == (
        "the best setting still waits for data (data wait 20.0% of the step time, GPU busy 80%, training thread busy "
        "50%): the input pipeline is the limit, not the model. It reads the decoded cache (.npy): reading its files is the "
        "limit; a compact JPEG cache reads about 5x fewer bytes: `runner data cache /data/imagenet DST --format jpeg "
        "--max-side 320 --quality 90`, then data.root=DST.")


def test_the_trial_table_shows_the_streams_wait_and_the_host_cpus_beside_the_gpu():
    from runner.bench.tune import Knob, TuneResult
    from runner.bench.tuning import trial_table

    ks = [Knob("pipelines.train.hybrid.share", (0.6, 0.8), "CPU share")]
    written = Trial({"pipelines.train.hybrid.share": 0.8},
                    result={"images_per_s": 6132.0, "data_wait_share": 0.04, "stream_wait_share": 0.071,
                            "gpu_util_pct": 91.0, "cpu_busy_pct": 98.6})
    tuned = Trial({"pipelines.train.hybrid.share": 0.6}, result={"images_per_s": 6375.0, "data_wait_share": 0.082})
    title, columns, rows = trial_table("e.yaml", 200, ks, TuneResult(baseline=written, best=tuned,
                                                                     trials=[written, tuned]))
    assert columns == ["CPU share", "train img/s", "data wait", "stream wait", "GPU util", "host CPU busy", ""]
    assert rows == [["0.8", "6,132", "4.0%", "7.1%", "91%", "99%", "as written"],
                    ["0.6", "6,375", "8.2%", "-", "-", "-", "best"]]
