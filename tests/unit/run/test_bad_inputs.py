"""A catalog of bad inputs, each through the real CLI in-process, each message pinned.

Every case: exit code 2, stderr is one paragraph that starts with "error: " (one line, no traceback),
naming the file (or the command line) and the key path or pipeline step, and what would be valid.
Then the cases where nothing may fail (files that decode, values YAML reads as numbers), and the
cases where a failure must not lose what was already written.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from timm.optim import list_optimizers

from tests.fixtures.bad_inputs import (
    EXP,
    EXP_MINE,
    LAUNCH,
    PIPE,
    VALIDATE,
    Case,
    check_bad_input,
    images,
    snapshot,
    train_and_val,
)
from tests.helpers import run_cli

LAYOUT = "Expected an ImageFolder: ROOT/<class>/<image>.jpg, one folder per class with the images directly inside."


KEYS = "Valid keys: name, description, seed, model, optimizer, scheduler, trainer, data, pipelines, tracking, launcher."


OPTIMIZER_KEYS = ("Valid keys in optimizer: name, lr, lr_reference_batch, momentum, nesterov, weight_decay, betas, "
                  "eps, no_decay_on_norm_and_bias, layer_decay, kwargs.")


URI_FORMS = ("Use http(s)://host[:port][/path] (a tracking server), sqlite:///path/to/mlflow.db (sqlite:////abs/"
             "path.db for an absolute path), file:///path/to/dir or a plain directory path (a file store), "
             "postgresql://, mysql:// or mssql:// database URLs, or databricks[://profile].")


TRANSFORMS = ("AutoAugment, CenterCrop, ColorJitter, ConvertImageDtype, GaussianBlur, Grayscale, Normalize, PILToTensor, "
              "RandAugment, RandomCrop, RandomErasing, RandomGrayscale, RandomHorizontalFlip, RandomResizedCrop, "
              "RandomRotation, RandomVerticalFlip, Resize, ToTensor, TrivialAugmentWide")


NO_GPU = ("the experiment asks for a GPU (trainer.accelerator: gpu) but this machine has none that CUDA can use (NVML "
          "found no device, or CUDA_VISIBLE_DEVICES hides them). Set trainer.accelerator=auto to fall back to the "
          "CPU, or run on a GPU machine.")


def only_train(p: Path) -> None:
    images(p / "data" / "train")


def empty_train(p: Path) -> None:
    (p / "data" / "train").mkdir(parents=True)
    images(p / "data" / "val")


def empty_class(p: Path) -> None:
    images(p / "data" / "train")
    (p / "data" / "train" / "c2").mkdir()
    images(p / "data" / "val")


def text_files_only(p: Path) -> None:
    for c in ("cat", "dog"):
        (p / "data" / "train" / c).mkdir(parents=True)
        (p / "data" / "train" / c / "notes.txt").write_text("not an image")
    images(p / "data" / "val")


def no_class_folders(p: Path) -> None:
    images(p / "data" / "flat")
    (p / "data" / "train").mkdir()
    for f in sorted((p / "data" / "flat").rglob("*.jpg")):
        f.rename(p / "data" / "train" / f"{f.parent.name}-{f.name}")
    images(p / "data" / "val")


def someone_elses_photos(p: Path) -> None:
    (p / "photos" / "cats").mkdir(parents=True)
    (p / "photos" / "cats" / "1.jpg").write_bytes(b"mine")


CASES = [
    # ---- YAML syntax: the line, what is wrong, the usual cause
    Case("tab indentation", exp=EXP + "seed: 1\nname:\n\tfoo\n",
         expected="experiments/exp.yaml:10: YAML syntax error: found character '\\t' that cannot start any token. "
                  "YAML indents with spaces only: replace the tab with spaces."),
    Case("unclosed brace", exp=EXP.replace("{name: resnet18, num_classes: 2}", "{name: resnet18, num_classes: 2"),
         expected="experiments/exp.yaml:2: YAML syntax error: expected ',' or '}', but got ':' (while parsing a flow "
                  "mapping that starts on line 1). Check that the '{' on line 1 is closed with '}' and its items are "
                  "separated by commas."),
    Case("unclosed bracket", exp=EXP + "description: [a, b\n",
         expected="experiments/exp.yaml:9: YAML syntax error: expected ',' or ']', but got '<stream end>' (while "
                  "parsing a flow sequence that starts on line 8). Check that the '[' on line 8 is closed with ']' "
                  "and its items are separated by commas."),
    Case("duplicate key", exp=EXP + "model: {name: resnet34}\n",
         expected="experiments/exp.yaml:8: model: duplicate key (first written on line 1). A YAML mapping holds each "
                  "key once: merge the two or remove one."),
    Case("duplicate nested key", exp="optimizer:\n  lr: 0.1\n  momentum: 0.9\n  lr: 0.2\n" + EXP,
         expected="experiments/exp.yaml:4: optimizer.lr: duplicate key (first written on line 2). A YAML mapping holds "
                  "each key once: merge the two or remove one."),
    Case("tab in a pipeline file", exp=EXP_MINE, pipe=PIPE.replace("  - images = resize", "\t- images = resize"),
         expected="pipelines/mine.yaml:5: YAML syntax error: found character '\\t' that cannot start any token. YAML "
                  "indents with spaces only: replace the tab with spaces."),
    Case("duplicate key in a pipeline file", exp=EXP_MINE, pipe=PIPE + "params: {size: 3}\n",
         expected="pipelines/mine.yaml:8: params: duplicate key (first written on line 1). A YAML mapping holds each "
                  "key once: merge the two or remove one."),
    Case("list at the top level", exp="- model: resnet18\n",
         expected="experiments/exp.yaml:1: expected a mapping of keys at the top level of the file."),

    # ---- unknown keys
    Case("unknown top-level key", exp=EXP + "optimiser: {lr: 1}\n",
         expected=f"experiments/exp.yaml:8: optimiser: unknown key. Did you mean 'optimizer'? {KEYS}"),
    Case("unknown nested key", exp=EXP + "optimizer:\n  lr_shedule: 3\n",
         expected=f"experiments/exp.yaml:9: optimizer.lr_shedule: unknown key. {OPTIMIZER_KEYS}"),
    Case("unknown key in a pipeline file", exp=EXP_MINE, pipe=PIPE + "output: [images]\n",
         expected="pipelines/mine.yaml:8: output: unknown key. Did you mean 'outputs'? Valid keys: description, "
                  "params, steps, outputs."),

    # ---- wrong types
    Case("wrong type", args=[*VALIDATE, "trainer.epochs=two"],
         expected="command line 'trainer.epochs=two': trainer.epochs: 'two' is not valid; expected an integer."),
    Case("scalar for a section", exp=EXP + "scheduler: cosine\n",
         expected="experiments/exp.yaml:8: scheduler: 'cosine' is not valid; expected a mapping with keys name, "
                  "warmup_epochs, warmup_start_factor, step_epochs, gamma, min_lr_factor, pct_start."),
    Case("list for a mapping", args=[*VALIDATE, "model.kwargs=[0.2]"],
         expected="command line 'model.kwargs=[0.2]': model.kwargs: [0.2] is not valid; expected a mapping."),
    Case("text for a pair", args=[*VALIDATE, "optimizer.betas=0.9"],
         expected="command line 'optimizer.betas=0.9': optimizer.betas: 0.9 is not valid; expected a list of numbers."),

    # ---- out of range
    Case("negative lr", exp=EXP + "optimizer: {lr: -0.1}\n",
         expected="experiments/exp.yaml:8: optimizer.lr: -0.1 is out of range; it must be greater than 0."),
    Case("batch size 0", args=[*VALIDATE, "data.batch_size=0"],
         expected="command line 'data.batch_size=0': data.batch_size: 0 is out of range; it must be at least 1."),
    Case("momentum 1.0", args=[*VALIDATE, "optimizer.momentum=1.0"],
         expected="command line 'optimizer.momentum=1.0': optimizer.momentum: 1.0 is out of range; it must be at "
                  "least 0 and less than 1."),
    Case("label smoothing 1.0", args=[*VALIDATE, "trainer.label_smoothing=1.0"],
         expected="command line 'trainer.label_smoothing=1.0': trainer.label_smoothing: 1.0 is out of range; it must "
                  "be at least 0 and less than 1."),
    Case("devices 0", args=[*VALIDATE, "trainer.devices=0"],
         expected="command line 'trainer.devices=0': trainer.devices: 0 is out of range; it must be at least 1."),
    Case("num_threads 0", args=[*VALIDATE, "data.num_threads=0"],
         expected="command line 'data.num_threads=0': data.num_threads: 0 is out of range; it must be at least 1."),

    # ---- names that resolve through registries
    Case("unknown model", exp=EXP.replace("resnet18", "resnet_18"),
         expected="experiments/exp.yaml:1: model.name: unknown model 'resnet_18'. Did you mean 'resnet18'? Valid "
                  "models: alexnet, convnext_base, convnext_large, convnext_small, convnext_tiny, densenet121, "
                  "densenet161, densenet169, densenet201, efficientnet_b0, efficientnet_b1, efficientnet_b2, "
                  "efficientnet_b3, efficientnet_b4, efficientnet_b5, efficientnet_b6, efficientnet_b7, "
                  "efficientnet_v2_l, efficientnet_v2_m, efficientnet_v2_s, googlenet, inception_v3, maxvit_t, "
                  "mnasnet0_5, mnasnet0_75, mnasnet1_0, mnasnet1_3, mobilenet_v2, mobilenet_v3_large, "
                  "mobilenet_v3_small, regnet_x_16gf, regnet_x_1_6gf, regnet_x_32gf, regnet_x_3_2gf, regnet_x_400mf, "
                  "regnet_x_800mf, regnet_x_8gf, regnet_y_128gf, regnet_y_16gf, regnet_y_1_6gf, ... (80 in all)."),
    Case("unknown optimizer", args=[*VALIDATE, "optimizer.name=adamm"],
         expected="command line 'optimizer.name=adamm': optimizer.name: unknown optimizer 'adamm'. Did you mean "
                  f"'adam'? optimizer.name takes one of timm.optim's {len(list_optimizers())} optimizers, e.g. sgd, "
                  "momentum, adamw, lamb, lars, lion, rmsproptf, adafactor; `runner optimizers` lists them all with "
                  "what they are."),
    Case("unknown scheduler", exp=EXP + "scheduler: {name: cosin}\n",
         expected="experiments/exp.yaml:8: scheduler.name: unknown scheduler 'cosin'. Did you mean 'cosine'? Valid "
                  "schedulers: constant, cosine, linear, onecycle, step."),
    Case("unknown operator", exp=EXP_MINE, pipe=PIPE.replace("decoders.image(", "decoders.imag("),
         expected="pipelines/mine.yaml:4: step 2 (images = decoders.imag(jpegs, output_type=RGB)): unknown operator "
                  "'decoders.imag'. Did you mean 'decoders.image'? Operators are DALI's fn names, such as "
                  "readers.file, decoders.image, resize, crop_mirror_normalize, random.coin_flip; `runner ops` lists "
                  "all 138."),
    Case("unknown argument", exp=EXP_MINE, pipe=PIPE.replace("resize_x=32", "resize_shortr=32"),
         expected="pipelines/mine.yaml:5: step 3 (images = resize(images, resize_shortr=32, resize_y=32)): unknown "
                  "argument 'resize_shortr'. resize takes: antialias, bytes_per_sample_hint, dtype, interp_type, "
                  "mag_filter, max_size, min_filter, minibatch_size, mode, preserve, resize_longer, resize_shorter, "
                  "resize_x, resize_y, resize_z, roi_end, roi_relative, roi_start, save_attrs, size, "
                  "subpixel_scale, temp_buffer_hint, device, name. Did you mean 'resize_shorter'?"),
    Case("missing pipeline file", exp=EXP.replace("use: imagenet_eval", "use: imagenet_evl"),
         expected="experiments/exp.yaml:6: pipelines.eval.use: pipeline 'imagenet_evl' not found (looked in "
                  "{project}/pipelines, {repo}/pipelines). Did you mean 'imagenet_eval'? Available pipelines: "
                  "imagenet_eval, imagenet_eval_cache, imagenet_eval_tfrecord, imagenet_eval_wds, imagenet_train, "
                  "imagenet_train_cache, imagenet_train_fused, imagenet_train_randaugment, imagenet_train_tfrecord, "
                  "imagenet_train_timm, imagenet_train_trivialaugment, imagenet_train_wds."),
    Case("missing pipeline file given as a path", exp=EXP.replace("use: imagenet_eval", "use: ../pipelines/evl.yaml"),
         expected="experiments/exp.yaml:6: pipelines.eval.use: pipeline '../pipelines/evl.yaml' not found (looked in "
                  "{project}/experiments, {project}). Available pipelines: imagenet_eval, imagenet_eval_cache, "
                  "imagenet_eval_tfrecord, imagenet_eval_wds, imagenet_train, imagenet_train_cache, imagenet_train_fused, "
                  "imagenet_train_randaugment, imagenet_train_tfrecord, imagenet_train_timm, imagenet_train_trivialaugment, "
                  "imagenet_train_wds."),
    Case("pipeline param it lacks", args=[*VALIDATE, "pipelines.train.params.sise=64"],
         expected="command line 'pipelines.train.params.sise=64': pipelines.train.params.sise: pipeline "
                  "'imagenet_train' has no parameter 'sise'. Did you mean 'size'? Its parameters: data_root, size, "
                  "shuffle, decode_device, hw_decoder_load."),
    Case("compile mode torch does not have", args=[*VALIDATE, "trainer.compile_mode=fast"],
         expected="command line 'trainer.compile_mode=fast': trainer.compile_mode: 'fast' is not valid; expected one "
                  "of: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs."),
    Case("stream priority CUDA has no name for", args=[*VALIDATE, "trainer.stream_priority=urgent"],
         expected="command line 'trainer.stream_priority=urgent': trainer.stream_priority: 'urgent' is not valid; "
                  "expected one of: default, high."),
    Case("hybrid deal that does not exist", args=[*VALIDATE, "pipelines.train.hybrid.params.size=32",
                                                  "pipelines.train.hybrid.deal=small"],
         expected="command line 'pipelines.train.hybrid.deal=small': pipelines.train.hybrid.deal: 'small' is not "
                  "valid; expected one of: random, smallest, largest. Did you mean 'smallest'?"),
    Case("hybrid copy without params", args=[*VALIDATE, "pipelines.train.hybrid.share=0.5"],
         expected="command line 'pipelines.train.hybrid.share=0.5': pipelines.train.hybrid: sets no params, so the "
                  "copy would be the same pipeline twice; set the parameters the copy changes in "
                  "'pipelines.train.hybrid.params', e.g. {decode_device: cpu}."),
    Case("hybrid copy param the pipeline lacks", args=[*VALIDATE, "pipelines.train.hybrid.params.decode=cpu"],
         expected="command line 'pipelines.train.hybrid.params.decode=cpu': pipelines.train.hybrid.params.decode: "
                  "pipeline 'imagenet_train' has no parameter 'decode'. Did you mean 'decode_device'? Its parameters: "
                  "data_root, size, shuffle, decode_device, hw_decoder_load."),
    Case("hybrid eval pipeline", args=[*VALIDATE, "pipelines.eval.hybrid.params.size=32"],
         expected="command line 'pipelines.eval.hybrid.params.size=32': pipelines.eval.hybrid: only the train "
                  "pipeline can be split between two copies; remove 'pipelines.eval.hybrid' (evaluation is not what "
                  "keeps the GPU waiting)."),
    Case("hybrid share that leaves a copy no image", args=[*VALIDATE, "pipelines.train.hybrid.share=0.2",
                                                          "pipelines.train.hybrid.params.size=32"],
         expected="command line 'pipelines.train.hybrid.share=0.2': pipelines.train.hybrid.share: 0.2 of a batch of "
                  "2 (data.batch_size) is 0 image(s), so one copy of the pipeline would make none; choose a share "
                  "between 0.5 and 0.5."),
    Case("hybrid pipeline whose reader lists its files", exp=EXP_MINE,
         pipe=PIPE.replace("file_root=$data_root", "file_root=$data_root, file_list=\"/d/list.txt\""),
         args=[*VALIDATE, "pipelines.train.hybrid.params.data_root=/e"],
         expected="command line 'pipelines.train.hybrid.params.data_root=/e': pipelines.train.hybrid: a hybrid "
                  "pipeline deals the split's files between its two copies, so its reader must be "
                  "readers.file(file_root=...) without file_list or files."),

    # ---- pipeline graphs
    Case("undefined stream", exp=EXP_MINE, pipe=PIPE.replace("decoders.image(jpegs", "decoders.image(jpgs"),
         expected="pipelines/mine.yaml:4: step 2 (images = decoders.image(jpgs, output_type=RGB)): undefined stream "
                  "'jpgs'. Did you mean 'jpegs'? Streams defined so far: jpegs, labels."),
    Case("one name for two outputs", exp=EXP_MINE, pipe=PIPE.replace("jpegs, labels =", "jpegs, jpegs ="),
         expected="pipelines/mine.yaml:3: step 1 (jpegs, jpegs = readers.file(file_root=$data_root)): 'jpegs' names "
                  "two outputs of this step; give each output its own name, for example `jpegs, labels = "
                  "readers.file(...)`, or write _ for an output to discard."),
    Case("cycle", exp=EXP_MINE,
         pipe=PIPE.replace("  - images = resize(images, resize_x=32, resize_y=32)\n",
                           "  - a = resize(b, resize_x=8)\n  - b = flip(a)\n").replace("[images, labels]",
                                                                                      "[images, labels, b]"),
         expected="pipelines/mine.yaml:5: step 3 (a = resize(b, resize_x=8)): cycle: a -> b -> a. A pipeline is a "
                  "graph without cycles: each step may only use streams defined by the steps above it."),
    Case("GPU stream into a CPU step", exp=EXP_MINE,
         pipe=PIPE.replace("output_type=RGB)", 'device="mixed", output_type=RGB)').replace(
             "resize(images, ", 'resize(images, device="cpu", '),
         expected="pipelines/mine.yaml:5: step 3 (images = resize(images, device=\"cpu\", resize_x=32, resize_y=32)): "
                  "stream 'images' (from step 2, decoders.image on the GPU) is on the GPU but this step runs on the "
                  "CPU, and DALI cannot copy data back to the CPU; set device=\"gpu\" on this step."),
    Case("pipeline without steps", exp=EXP_MINE, pipe="params: {data_root: /d}\noutputs: [images, labels]\n",
         expected="pipelines/mine.yaml: steps: the pipeline has no steps; the first step is a reader, for example "
                  "`jpegs, labels = readers.file(file_root=$data_root)`."),

    # ---- files and the command line
    Case("missing experiment file", exp=None, args=["validate", "experiments/nope.yaml"],
         expected="experiments/nope.yaml: experiment file not found."),
    Case("experiment file is a folder", args=["validate", "experiments"],
         expected="experiments: is a folder, not an experiment file; name a YAML file. YAML files in it: exp.yaml."),
    Case("include that does not exist", exp="include: [tuned.yaml]\n" + EXP,
         expected="experiments/exp.yaml:1: include[0]: included file experiments/tuned.yaml not found (an "
                  "include path is relative to the file that names it)."),
    Case("override without '='", args=[*LAUNCH, "optimizer.lr"],
         expected="command line: 'optimizer.lr' is not an override; write key.path=value, for example "
                  "optimizer.lr=0.05 (one experiment file comes first)."),
    Case("override without '=' before the file", args=["validate", "optimizer.lr", "experiments/exp.yaml"],
         expected="optimizer.lr: experiment file not found. If it was meant as an override, write key.path=value, for "
                  "example optimizer.lr=0.05."),
    Case("override of an unknown key", args=[*VALIDATE, "optimizer.lrr=0.1"],
         expected=f"command line 'optimizer.lrr=0.1': optimizer.lrr: unknown key. Did you mean 'lr'? {OPTIMIZER_KEYS}"),
    Case("override of an unknown section", args=[*VALIDATE, "optimiser.lr=0.1"],
         expected=f"command line 'optimiser.lr=0.1': optimiser: unknown key. Did you mean 'optimizer'? {KEYS}"),
    Case("override value that is not YAML", args=[*VALIDATE, "optimizer.betas=[0.9,"],
         expected="command line 'optimizer.betas=[0.9,': optimizer.betas: cannot parse the value as YAML: did not "
                  "find expected node content. Write a YAML value such as 0.05, true, [0.9, 0.99] or {dropout: 0.2}, "
                  "and quote the whole argument in the shell."),
    Case("model kwarg the constructor does not take", args=[*VALIDATE, "model.kwargs={dropout: 0.5}"],
         expected="command line 'model.kwargs={dropout: 0.5}': model.kwargs: resnet18 does not accept these "
                  "arguments: ResNet.__init__() got an unexpected keyword argument 'dropout'. It takes: block, layers, "
                  "zero_init_residual, groups, width_per_group, replace_stride_with_dilation, norm_layer."),
    Case("model kwarg the constructor rejects", args=[*VALIDATE, "model.name=efficientnet_b0",
                                                      "model.kwargs={dropout: 2.0}"],
         expected="command line 'model.kwargs={dropout: 2.0}': model.kwargs: efficientnet_b0 does not accept these "
                  "arguments: dropout probability has to be between 0 and 1, but got 2.0. It takes: "
                  "inverted_residual_setting, dropout, stochastic_depth_prob, norm_layer, last_channel."),
    Case("synthetic min_side above max_side", exp=EXP.replace("root: data", "synth: {min_side: 200, max_side: 100}"),
         expected="experiments/exp.yaml:3: data.synth.min_side: 200 is larger than data.synth.max_side (100); "
                  "generated images have sides between the two, so min_side must be at most max_side."),
    Case("several nodes without a rendezvous", args=[*VALIDATE, "trainer.nnodes=2"],
         expected="command line 'trainer.nnodes=2': trainer.nnodes: 2 nodes need trainer.rdzv_endpoint=HOST:PORT, "
                  "the address of node 0 (the same on every node)."),
    Case("bad transform argument",
         exp=EXP.replace(
             "data: {root: data, batch_size: 2}",
             "data: {root: data, batch_size: 2, loader: torchvision, torchvision: {train: ['RandomResizedCrop(224, "
             "scale=3)']}}"),
         expected="experiments/exp.yaml:3: data.torchvision.train[0]: 'RandomResizedCrop(224, scale=3)': Scale should "
                  "be a sequence. Signature: RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(0.75, "
                  "1.3333333333333333), interpolation=<InterpolationMode.BILINEAR: 'bilinear'>, antialias: "
                  "Optional[bool] = True)."),
    Case("unknown transform", args=[*VALIDATE, "data.loader=torchvision",
                                    "data.torchvision.eval=[Resize(36), CentreCrop(32), ToTensor()]"],
         expected="command line 'data.torchvision.eval=[Resize(36), CentreCrop(32), ToTensor()]': "
                  "data.torchvision.eval[1]: unknown transform 'CentreCrop'. Did you mean 'CenterCrop'? Valid "
                  f"transforms: {TRANSFORMS}."),
    Case("malformed tracking URI", exp=EXP.replace("tracking: {enabled: false}", "tracking: {uri: 'htp://mlflow:5000'}"),
         expected=f"experiments/exp.yaml:7: tracking.uri: 'htp://mlflow:5000' is not a tracking store URI. {URI_FORMS} "
                  "Did you mean 'http://mlflow:5000'?"),
    Case("malformed MLFLOW_TRACKING_URI", args=[*VALIDATE, "tracking.enabled=true"],
         env={"MLFLOW_TRACKING_URI": "sqlite://runs.db"},
         expected=f"$MLFLOW_TRACKING_URI: 'sqlite://runs.db' is not a tracking store URI. {URI_FORMS} Did you mean "
                  "'sqlite:///runs.db'?"),
    Case("GPU demanded on a CPU machine", exp=EXP.replace("{epochs: 1}", "{epochs: 1, accelerator: gpu}"),
         needs_no_gpu=True, expected=f"experiments/exp.yaml:2: trainer.accelerator: {NO_GPU}"),
    Case("GPU processes on a CPU machine", args=[*VALIDATE, "trainer.accelerator=gpu", "trainer.devices=4"],
         needs_no_gpu=True, expected=f"command line 'trainer.accelerator=gpu': trainer.accelerator: {NO_GPU}"),

    # ---- data, found missing or unusable by `runner launch` before any work starts
    Case("data.root points nowhere", args=[*LAUNCH, "data.root=nowhere/imagenet"],
         expected="command line 'data.root=nowhere/imagenet': data.root: "
                  f"nowhere/imagenet/train: no such folder (nowhere does not exist either). {LAYOUT}"),
    Case("no val split", args=LAUNCH, setup=only_train,
         expected=f"experiments/exp.yaml:3: data.eval_split: data/val: no such folder; data holds: train. {LAYOUT}"),
    Case("empty train split", args=LAUNCH, setup=empty_train,
         expected=f"experiments/exp.yaml:3: data.root: data/train: the folder is empty. {LAYOUT}"),
    Case("class folder without images", args=LAUNCH, setup=empty_class,
         expected="experiments/exp.yaml:3: data.root: data/train: 1 of 3 class folders hold no images: 'c2'. DALI's reader numbers every subfolder as a "
                  "class (hidden and empty ones too), so these would shift the labels; remove them or add images. "
                  f"{LAYOUT}"),
    Case("non-image files only", args=LAUNCH, setup=text_files_only,
         expected="experiments/exp.yaml:3: data.root: data/train: no class folder holds a file the reader reads: 'cat', 'dog' hold 2 file(s) such as "
                  "'cat/notes.txt' (.txt). The reader takes only .jpg, .jpeg, .png, .bmp, .tif, .tiff, .pnm, .ppm, "
                  f".pgm, .pbm, .jp2, .webp, .flac, .ogg, .wav (any case). {LAYOUT}"),
    Case("images outside class folders", args=LAUNCH, setup=no_class_folders,
         expected="experiments/exp.yaml:3: data.root: data/train: no class folders, only 4 file(s) such as 'c0-000.jpg'. Expected an ImageFolder: "
                  "ROOT/<class>/<image>.jpg, one folder per class with the images directly inside; put each class's "
                  "images in a folder named after the class."),
    Case("synthetic set into someone's folder", exp=None, setup=someone_elses_photos,
         args=["data", "synth", "photos", "--classes", "2", "--per-class", "1", "--eval-per-class", "1",
               "--min-side", "16", "--max-side", "20"],
         expected="photos: exists and is a folder without .runner-synth.json, not a synthetic dataset made by runner. "
                  "runner does not write into (or delete) data it did not make: choose a new or empty folder, or "
                  "remove this one."),
    # ---- gradient accumulation (trainer.global_batch_size)
    Case("global batch not a whole number of batches per process",
         exp=EXP.replace("trainer: {epochs: 1}", "trainer: {epochs: 1, global_batch_size: 6}"),
         args=VALIDATE + ["trainer.devices=2"],
         expected="experiments/exp.yaml:2: trainer.global_batch_size: 6 is not a whole multiple of data.batch_size x "
                  "processes = 2 x 2 = 4: each optimizer step accumulates the same whole number of batches of "
                  "data.batch_size on every process. Valid here: 4, 8, 12, ... (accumulating 1, 2, 3, ... batches), "
                  "or null (4); or change data.batch_size."),
]


def test_the_catalog_is_large_enough():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, project, capsys, monkeypatch):
    check_bad_input(case, project, capsys, monkeypatch)




def test_cpu_processes_are_allowed_for_gloo_ddp(project, capsys):
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, out, err = run_cli([*VALIDATE, "trainer.devices=4", "trainer.accelerator=cpu"], capsys)
    assert code == 0, err
    assert "4 x cpu" in out


def test_a_number_where_text_is_expected_is_read_as_text(project, capsys):
    from runner.config.load import load_experiment

    (project / "experiments" / "exp.yaml").write_text(EXP.replace("{epochs: 1}", "{epochs: 1, rdzv_id: 12345}")
                                                      + "name: 2024\n")
    code, _, err = run_cli(VALIDATE, capsys)
    assert code == 0, err
    cfg = load_experiment("experiments/exp.yaml", ["tracking.experiment=7"]).config
    assert (cfg.trainer.rdzv_id, cfg.name, cfg.tracking.experiment) == ("12345", "2024", "7")


def test_underscore_discards_several_outputs(project, capsys):
    (project / "experiments" / "exp.yaml").write_text(EXP_MINE)
    (project / "pipelines" / "mine.yaml").write_text(PIPE.replace(
        "  - images = decoders.image(jpegs, output_type=RGB)\n",
        "  - images = decoders.image(jpegs, output_type=RGB)\n  - _, _ = readers.file(file_root=$data_root)\n"))
    code, _, err = run_cli([*VALIDATE, "pipelines.train.params.data_root=/d"], capsys)
    assert code == 0, err


def test_a_list_item_can_be_overridden(project):
    from runner.config.load import load_experiment

    (project / "experiments" / "exp.yaml").write_text(EXP + "optimizer: {name: adamw, betas: [0.9, 0.999]}\n")
    assert load_experiment("experiments/exp.yaml", ["optimizer.betas[0]=0.95"]).config.optimizer.betas == (0.95, 0.999)


def test_interpolation_in_an_override_resolves_with_the_config(project, capsys):
    from runner.config.load import load_experiment

    (project / "experiments" / "exp.yaml").write_text(EXP)
    loaded = load_experiment("experiments/exp.yaml", ["tracking.run_name=${model.name}-run"])
    assert loaded.config.tracking.run_name == "resnet18-run"
    code, _, err = run_cli([*VALIDATE, "tracking.run_name=${nope}"], capsys)
    assert (code, err) == (2, "error: command line 'tracking.run_name=${nope}': tracking.run_name: cannot resolve "
                              "interpolation: Interpolation key 'nope' not found.\n")


def test_scan_split_names_the_key_that_points_at_the_data(project):
    from runner.data.splits import scan_split
    from runner.errors import DataError
    from runner.run.validate import validate

    only_train(project)
    (project / "experiments" / "exp.yaml").write_text(EXP)
    v = validate("experiments/exp.yaml")
    assert len(scan_split(v.loaded, "train")) == 4
    with pytest.raises(DataError) as e:
        scan_split(v.loaded, "eval")
    assert str(e.value) == f"experiments/exp.yaml:3: data.eval_split: data/val: no such folder; data holds: train. {LAYOUT}"
    v = validate("experiments/exp.yaml", ["data.root=nowhere"])
    with pytest.raises(DataError) as e:
        scan_split(v.loaded, "train")
    assert str(e.value) == ("command line 'data.root=nowhere': data.root: nowhere/train: no such folder (nowhere "
                            f"does not exist either). {LAYOUT}")


@pytest.mark.parametrize("command", ["compile", "tune"])
def test_a_config_error_leaves_the_output_file_alone(project, capsys, command):
    (project / "experiments" / "exp.yaml").write_text(EXP)
    (project / "out.txt").write_text("earlier results\n")
    code, _, err = run_cli([command, "experiments/exp.yaml", "optimizer.lr=0", "-o", "out.txt"], capsys)
    assert (code, err) == (2, "error: command line 'optimizer.lr=0': optimizer.lr: 0.0 is out of range; it must be "
                              "greater than 0.\n")
    assert (project / "out.txt").read_text() == "earlier results\n"


def test_compile_into_a_folder_is_an_error(project, capsys):
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, _, err = run_cli(["compile", "experiments/exp.yaml", "-o", "experiments"], capsys)
    assert (code, err) == (2, "error: command line: --output: experiments is a folder; name a file to write.\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_class_folder(project, capsys):
    images(project / "data" / "train")
    images(project / "data" / "val")
    (project / "experiments" / "exp.yaml").write_text(EXP)
    (project / "data" / "train" / "c1").chmod(0)
    try:
        code, _, err = run_cli(LAUNCH, capsys)
    finally:
        (project / "data" / "train" / "c1").chmod(0o755)
    assert (code, err) == (2, "error: data/train/c1: cannot list this folder (Permission denied).\n")
import dataclasses  # noqa: E402
import re  # noqa: E402
import types  # noqa: E402
import typing  # noqa: E402

import yaml  # noqa: E402

from runner.config.sections import Experiment  # noqa: E402

_NO_VALUE = object()


def schema_fields(cls: type = Experiment, prefix: str = "") -> list[tuple[str, dataclasses.Field, typing.Any]]:
    """(key path, field, annotation) for every field, nested sections (optional ones too) walked."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        out.append((key, f, tp))
        nested = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        for section in nested:
            out += schema_fields(section, key + ".")
    return out


def _options(tp: typing.Any) -> list[typing.Any]:
    """The non-null types a field accepts: [int, Literal['auto']] for `int | Literal['auto']`."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    return [a for a in (typing.get_args(tp) if union else (tp,)) if a is not type(None)]


def wrong_type(tp: typing.Any) -> typing.Any:
    """A YAML value that no option of the annotation accepts; _NO_VALUE for Any."""
    options = _options(tp)
    if typing.Any in options:
        return _NO_VALUE
    if any(typing.get_origin(a) is dict or dataclasses.is_dataclass(a) for a in options):
        return 7                  # a number for a mapping or a section
    if any(a is str or typing.get_origin(a) in (list, tuple) for a in options):
        return {"wrong": 1}       # a mapping for text (which takes numbers as text) or a list
    return "wrong"                # text for a number, a flag or one of a set of names


def out_of_range(f: dataclasses.Field, tp: typing.Any) -> typing.Any:
    """A value just outside the field's bounds (each item, for a pair); _NO_VALUE for a field without bounds."""
    meta = f.metadata
    if not meta:
        return _NO_VALUE
    step = 1 if int in _options(tp) else 0.5
    value = (meta["ge"] - step if "ge" in meta else meta["gt"] if "gt" in meta
             else meta["le"] + step if "le" in meta else meta["lt"])
    pair = next((a for a in _options(tp) if typing.get_origin(a) is tuple), None)  # an optional pair too
    return [value] * len(typing.get_args(pair)) if pair is not None else value


def _nested(key: str, value: typing.Any) -> dict:
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


BAD_FIELDS = [(key, kind, value)
              for key, f, tp in schema_fields()
              for kind, value in (("wrong type", wrong_type(tp)), ("out of range", out_of_range(f, tp)))
              if value is not _NO_VALUE]


def test_the_walk_reaches_every_section():
    keys = {key for key, _, _ in BAD_FIELDS}
    for key in ("seed", "model.num_classes", "optimizer.betas", "scheduler.pct_start", "trainer.compile_mode",
                "data.synth.quality", "data.torchvision.prefetch_factor", "pipelines.train.hybrid.share",
                "pipelines.eval.use", "tracking.tags"):
        assert key in keys, key
    assert len(BAD_FIELDS) > 120


def _yaml_value(value: typing.Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


@pytest.mark.parametrize("command, where", [("validate", "file"), ("validate", "command line"),
                                            ("launch", "command line")])
@pytest.mark.parametrize("key, kind, value", BAD_FIELDS, ids=[f"{k} {kind}" for k, kind, _ in BAD_FIELDS])
def test_every_field_refuses_a_bad_value(project, capsys, key, kind, value, command, where):
    images(project / "data" / "train")
    images(project / "data" / "val")
    if where == "file":
        text = yaml.safe_dump(_merge(yaml.safe_load(EXP), _nested(key, value)), default_flow_style=False,
                              sort_keys=False)
        (project / "experiments" / "exp.yaml").write_text(text)
        args = [command, "experiments/exp.yaml"]
    else:
        (project / "experiments" / "exp.yaml").write_text(EXP)
        args = [command, "experiments/exp.yaml", f"{key}={_yaml_value(value)}"]
    before = snapshot(project)

    code, out, err = run_cli(args, capsys)

    assert code == 2, out + err
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1, err
    at = re.escape(key) + r"(\[\d\])?"
    if where == "file":
        match = re.match(rf"error: experiments/exp\.yaml:(\d+): {at}: ", err)
        assert match, err
        line = text.splitlines()[int(match[1]) - 1]
        assert line.strip().startswith(key.split(".")[-1] + ":") or line.strip().startswith("- "), (line, err)
    else:
        assert re.match(rf"error: command line '{re.escape(args[-1])}': {at}: ", err), err
    assert (" is not valid; expected " in err) if kind == "wrong type" else (" is out of range; it must be " in err)
    assert snapshot(project) == before


@pytest.mark.parametrize("args, note", [
    (["scheduler.warmup_epochs=1"], "note: scheduler.warmup_epochs=1 is not shorter than trainer.epochs=1: the lr "
                                    "stays in its warm-up and never reaches optimizer.lr.\n"),
    (["scheduler.name=step", "trainer.epochs=20"], "note: the step schedule decays the lr every "
                                                   "scheduler.step_epochs=30 epochs and trainer.epochs is 20: it never "
                                                   "decays.\n"),
])
def test_a_schedule_a_short_trial_cuts_short_is_a_note_not_an_error(args, note, project, capsys):
    (project / "experiments" / "exp.yaml").write_text(EXP)
    code, out, err = run_cli([*VALIDATE, *args], capsys)
    assert code == 0, err
    assert note in err


def file_for_a_split(p: Path) -> None:
    images(p / "data" / "train")
    (p / "data" / "val").write_text("not a folder")


def file_for_the_root(p: Path) -> None:
    (p / "data").write_text("not a folder")


def broken_class_link(p: Path) -> None:
    train_and_val(p)
    os.symlink(p / "data" / "moved-away", p / "data" / "train" / "c2")


def readme_only_class(p: Path) -> None:
    train_and_val(p)
    (p / "data" / "train" / "c2").mkdir()
    (p / "data" / "train" / "c2" / "README.txt").write_text("class 2 images go here")


def notebook_checkpoints_at_the_root(p: Path) -> None:
    train_and_val(p)
    (p / "data" / "train" / ".ipynb_checkpoints").mkdir()


def unfinished_jpeg_cache(p: Path) -> None:
    from runner.data.jpeg_cache import build_jpeg_cache

    images(p / "src" / "train", per_class=4)
    images(p / "src" / "val")

    def stop_after_3(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt  # as Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        build_jpeg_cache(p / "src", p / "data", max_side=16, quality=90, workers=1, progress=stop_after_3)


def jpeg_cache_of_an_image_since_moved(p: Path) -> None:
    """A cache, then an image relabelled in the source (moved to another class) and the cache built again: the
    build writes it under its new class and keeps the old copy, which no source image backs."""
    from runner.data.jpeg_cache import build_jpeg_cache

    images(p / "src" / "train")
    images(p / "src" / "val")
    build_jpeg_cache(p / "src", p / "data", max_side=16, quality=90, workers=1)
    os.replace(p / "src/train/c0/000.jpg", p / "src/train/c1/relabelled.jpg")
    assert build_jpeg_cache(p / "src", p / "data", max_side=16, quality=90, workers=1).stale == ("train/c0/000.jpg",)


FOLDER_CASES = [
    Case("a file where the eval split is expected", args=LAUNCH, setup=file_for_a_split,
         expected=f"experiments/exp.yaml:3: data.root: data/val: is a file, not a folder. {LAYOUT}"),
    Case("a file where data.root is expected", args=LAUNCH, setup=file_for_the_root,
         expected="experiments/exp.yaml:3: data.root: data/train: no such folder (data is a file, not a folder). "
                  f"{LAYOUT}"),
    Case("a class folder that is a broken link", args=LAUNCH, setup=broken_class_link,
         expected="experiments/exp.yaml:3: data.root: data/train: 'c2' is a broken symbolic link: DALI's reader stops "
                  "on it ('Could not access ... during directory traversal'). Remove it."),
    Case("a class folder holding only a README", args=LAUNCH, setup=readme_only_class,
         expected="experiments/exp.yaml:3: data.root: data/train: 1 of 3 class folders hold no images: 'c2'. DALI's "
                  "reader numbers every subfolder as a class (hidden and empty ones too), so these would shift the "
                  f"labels; remove them or add images. {LAYOUT}"),
    Case("notebook checkpoints at the split's top", args=LAUNCH, setup=notebook_checkpoints_at_the_root,
         expected="experiments/exp.yaml:3: data.root: data/train: 1 of 3 class folders hold no images: "
                  "'.ipynb_checkpoints'. DALI's reader numbers every subfolder as a class (hidden and empty ones too), "
                  f"so these would shift the labels; remove them or add images. {LAYOUT}"),
    Case("an empty train folder, checked", args=["data", "check", "data/train"], exp=None, setup=empty_train,
         expected=f"data/train: the folder is empty. {LAYOUT}"),
    Case("a cache whose build did not finish", args=LAUNCH, setup=unfinished_jpeg_cache,
         expected="experiments/exp.yaml:3: data.root: data is a cache whose build did not finish, so it holds only "
                  "part of its source {project}/src. Run `runner data cache {project}/src data --format jpeg "
                  "--max-side 16 --quality 90` again: it continues where it stopped."),
    Case("a cache holding an image its source moved to another class", args=LAUNCH,
         setup=jpeg_cache_of_an_image_since_moved,
         expected="experiments/exp.yaml:3: data.root: data holds 1 entry for which its last build found no image "
                  "in its source {project}/src (removed, or moved to another class, since cached): train/c0/000.jpg. "
                  "A run would read each as an image of the class folder it sits in. Remove them (paths relative to "
                  "data), or build the cache into a new folder."),
]


@pytest.mark.parametrize("case", FOLDER_CASES, ids=[c.id for c in FOLDER_CASES])
def test_bad_folder(case: Case, project, capsys, monkeypatch):
    test_bad_input(case, project, capsys, monkeypatch)


MIX = "pipelines.train.mix"


MIX_CASES = [
    Case("mix with both alphas 0", args=[*VALIDATE, f"{MIX}.prob=0.5"],
         expected=f"command line '{MIX}.prob=0.5': {MIX}: mixup_alpha and cutmix_alpha are both 0, so no batch would "
                  f"be mixed; set {MIX}.mixup_alpha (e.g. 0.2) and/or {MIX}.cutmix_alpha (e.g. 1.0) above 0, or "
                  f"remove '{MIX}'."),
    Case("mix of the eval pipeline", exp=EXP.replace("resize_shorter: 36, decode_device: cpu}",
                                                     "resize_shorter: 36, decode_device: cpu}, mix: {mixup_alpha: 0.2}"),
         expected="experiments/exp.yaml:6: pipelines.eval.mix: only the train pipeline's batches can be mixed; "
                  "remove 'pipelines.eval.mix' (evaluation measures the model on the images as they are)."),
    Case("mix mode that does not exist", args=[*VALIDATE, f"{MIX}.mixup_alpha=0.2", f"{MIX}.mode=element"],
         expected=f"command line '{MIX}.mode=element': {MIX}.mode: 'element' is not valid; expected one of: batch, "
                  "elem, pair. Did you mean 'elem'?"),
    Case("mix chance of 0", args=[*VALIDATE, f"{MIX}.mixup_alpha=0.2", f"{MIX}.prob=0"],
         expected=f"command line '{MIX}.prob=0': {MIX}.prob: 0 mixes no batch; set a chance above 0 (at most 1), or "
                  f"remove '{MIX}'."),
    Case("mix chance above 1", args=[*VALIDATE, f"{MIX}.mixup_alpha=0.2", f"{MIX}.prob=1.5"],
         expected=f"command line '{MIX}.prob=1.5': {MIX}.prob: 1.5 is out of range; it must be at least 0 and at "
                  "most 1."),
    Case("negative mixup alpha", args=[*VALIDATE, f"{MIX}.mixup_alpha=-1"],
         expected=f"command line '{MIX}.mixup_alpha=-1': {MIX}.mixup_alpha: -1.0 is out of range; it must be at "
                  "least 0."),
    Case("cutmix min-max the wrong way round", args=[*VALIDATE, f"{MIX}.cutmix_minmax=[0.8,0.2]"],
         expected=f"command line '{MIX}.cutmix_minmax=[0.8,0.2]': {MIX}.cutmix_minmax: [0.8, 0.2]: the box's "
                  "smallest side fraction must be below its largest, e.g. [0.2, 0.8]."),
    Case("cutmix min-max of one value", args=[*VALIDATE, f"{MIX}.cutmix_minmax=[0.3]"],
         expected=f"command line '{MIX}.cutmix_minmax=[0.3]': {MIX}.cutmix_minmax: [0.3] is not valid; expected a "
                  "list of 2 values."),
    Case("cutmix alpha beside min-max", exp=EXP.replace("size: 32, decode_device: cpu}}", "size: 32, decode_device: "
                                                        "cpu}, mix: {cutmix_alpha: 0.5, cutmix_minmax: [0.2, 0.8]}}"),
         expected="experiments/exp.yaml:5: pipelines.train.mix.cutmix_alpha: 0.5 has no effect with "
                  f"{MIX}.cutmix_minmax set: the box is drawn from the min-max fractions and lam is its area "
                  "(cutmix_alpha 1, as in timm); remove one of them."),
    Case("uncorrected lam with min-max", args=[*VALIDATE, f"{MIX}.cutmix_minmax=[0.2,0.8]", f"{MIX}.correct_lam=false"],
         expected=f"command line '{MIX}.correct_lam=false': {MIX}.correct_lam: false has no effect with "
                  f"{MIX}.cutmix_minmax set: lam is always the min-max box's area; remove one of them."),
    Case("switch chance with mixup alone", args=[*VALIDATE, f"{MIX}.mixup_alpha=0.2", f"{MIX}.switch_prob=0.7"],
         expected=f"command line '{MIX}.switch_prob=0.7': {MIX}.switch_prob: 0.7 chooses between mixup and cutmix, "
                  f"but only mixup is on; set both {MIX}.mixup_alpha and {MIX}.cutmix_alpha above 0, or remove "
                  "switch_prob."),
    Case("ema decay of 1", args=[*VALIDATE, "trainer.ema.decay=1"],
         expected="command line 'trainer.ema.decay=1': trainer.ema.decay: 1.0 is out of range; it must be greater "
                  "than 0 and less than 1."),
    Case("ema every 0 steps", args=[*VALIDATE, "trainer.ema.every_n_steps=0"],
         expected="command line 'trainer.ema.every_n_steps=0': trainer.ema.every_n_steps: 0 is out of range; it "
                  "must be at least 1."),
    Case("ema key that does not exist", args=[*VALIDATE, "trainer.ema.warmup_steps=100"],
         expected="command line 'trainer.ema.warmup_steps=100': trainer.ema.warmup_steps: unknown key. Did you mean "
                  "'warmup_power'? Valid keys in trainer.ema: decay, every_n_steps, warmup, warmup_gamma, "
                  "warmup_power, min_decay."),
    Case("ema warm-up power without warm-up", exp=EXP.replace("trainer: {epochs: 1}",
                                                              "trainer: {epochs: 1, ema: {warmup_power: 0.75}}"),
         expected="experiments/exp.yaml:2: trainer.ema.warmup_power: 0.75 is set but trainer.ema.warmup is false, so "
                  "the decay would stay 0.9998 from the first update; set trainer.ema.warmup=true, or remove "
                  "trainer.ema.warmup_power."),
    Case("ema floor above the decay", args=[*VALIDATE, "trainer.ema.warmup=true", "trainer.ema.decay=0.99",
                                            "trainer.ema.min_decay=0.995"],
         expected="command line 'trainer.ema.min_decay=0.995': trainer.ema.min_decay: 0.995 is above trainer.ema.decay "
                  "(0.99): the warm-up's decay rises to decay from min_decay, so min_decay must be at most decay."),
]


@pytest.mark.parametrize("case", MIX_CASES, ids=[c.id for c in MIX_CASES])
def test_bad_mix_or_ema(case: Case, project, capsys, monkeypatch):
    test_bad_input(case, project, capsys, monkeypatch)


MODEL_CASES = [
    Case("unknown timm model", exp=EXP.replace("resnet18", "timm/resnet50x"),
         expected="experiments/exp.yaml:1: model.name: unknown model 'timm/resnet50x'. Did you mean 'timm/resnet50'? "
                  "`runner models timm/` lists timm's 1371 models (a glob narrows it: `runner models 'timm/resnet*'`)."),
    Case("timm model without its prefix", args=[*VALIDATE, "model.name=resnet50d"],
         expected="command line 'model.name=resnet50d': model.name: unknown model 'resnet50d'. torchvision has no "
                  "resnet50d; timm's is written 'timm/resnet50d'."),
    Case("timm kwarg the constructor does not take", args=[*VALIDATE, "model.name=timm/resnet18",
                                                           "model.kwargs={drop_rat: 0.1}"],
         expected="command line 'model.kwargs={drop_rat: 0.1}': model.kwargs: timm/resnet18 does not accept these "
                  "arguments: ResNet.__init__() got an unexpected keyword argument 'drop_rat'. Did you mean "
                  "'drop_rate'? It takes: block, layers, in_chans, output_stride, global_pool, cardinality, base_width, "
                  "stem_width, stem_type, replace_stem_pool, block_reduce_first, down_kernel_size, avg_down, channels, "
                  "act_layer, norm_layer, aa_layer, drop_rate, drop_path_rate, drop_block_rate, zero_init_last, "
                  "block_args."),
    Case("timm kwarg a model's config does not take", args=[*VALIDATE, "model.name=timm/poolformer_s12",
                                                            "model.kwargs={drop_path: 0.1}"],
         expected="command line 'model.kwargs={drop_path: 0.1}': model.kwargs: timm/poolformer_s12 does not accept "
                  "these arguments: MetaFormer.__init__() got unexpected keyword argument(s): ['drop_path']. Did you "
                  "mean 'drop_path_rate'? It takes: in_chans, global_pool, depths, dims, token_mixers, mlp_act, "
                  "mlp_bias, drop_path_rate, proj_drop_rate, drop_rate, layer_scale_init_values, "
                  "res_scale_init_values, downsample_norm, norm_layers, output_norm, use_mlp_head."),
    Case("timm pretrained weights", args=[*VALIDATE, "model.name=timm/resnet18", "model.kwargs={pretrained: true}"],
         expected="command line 'model.kwargs={pretrained: true}': model.kwargs: timm/resnet18: 'pretrained' is not "
                  "an argument model.kwargs can set: models start from random weights unless model.init names weights "
                  "to load."),
    Case("num_classes as a kwarg", args=[*VALIDATE, "model.kwargs={num_classes: 5}"],
         expected="command line 'model.kwargs={num_classes: 5}': model.kwargs: resnet18: 'num_classes' is not an "
                  "argument model.kwargs can set: model.num_classes sets it."),
    Case("torchvision auxiliary logits", args=[*VALIDATE, "model.name=googlenet", "model.kwargs={aux_logits: true}"],
         expected="command line 'model.kwargs={aux_logits: true}': model.kwargs: googlenet: 'aux_logits' is not an "
                  "argument model.kwargs can set: runner builds googlenet with aux_logits=False, one output to "
                  "train."),
    Case("timm encoder without a classifier", args=[*VALIDATE, "model.name=timm/qwen3_vit_88m_enc"],
         expected="command line 'model.name=timm/qwen3_vit_88m_enc': model.name: timm/qwen3_vit_88m_enc has no "
                  "classifier: it returns features, not model.num_classes logits. Pick one of timm's classification "
                  "models (`runner models timm/`)."),
    Case("timm pretrained tag that the architecture lacks", args=[*VALIDATE, "model.name=timm/resnet18.a1_in1kk"],
         expected="command line 'model.name=timm/resnet18.a1_in1kk': model.name: unknown model "
                  "'timm/resnet18.a1_in1kk': timm's resnet18 has no pretrained tag 'a1_in1kk'. Did you mean 'a1_in1k'? "
                  "Its tags: a1_in1k, a2_in1k, a3_in1k, fb_ssl_yfcc100m_ft_in1k, fb_swsl_ig1b_ft_in1k, gluon_in1k, "
                  "tv_in1k."),
    Case("timm pretrained tag on an unknown architecture", args=[*VALIDATE, "model.name=timm/resnet5x.a1_in1k"],
         expected="command line 'model.name=timm/resnet5x.a1_in1k': model.name: unknown model 'timm/resnet5x'. Did "
                  "you mean 'timm/resnet50'? `runner models timm/` lists timm's 1371 models (a glob narrows it: "
                  "`runner models 'timm/resnet*'`)."),
    Case("torchvision kwarg on a constructor that computes with tensors", args=[
        *VALIDATE, "model.name=regnet_y_400mf", "model.kwargs={stem_width: 16, dropout: 0.1}"],
         expected="command line 'model.kwargs={stem_width: 16, dropout: 0.1}': model.kwargs: regnet_y_400mf does "
                  "not accept these arguments: RegNet.__init__() got an unexpected keyword argument 'dropout'. It "
                  "takes: block_params, stem_width, stem_type, block_type, norm_layer, activation."),
]


@pytest.mark.parametrize("case", MODEL_CASES, ids=[c.id for c in MODEL_CASES])
def test_bad_model(case: Case, project, capsys, monkeypatch):
    pytest.importorskip("timm")
    test_bad_input(case, project, capsys, monkeypatch)


def resnet18_state_dict(p: Path) -> None:
    import torch
    import torchvision

    (p / "weights").mkdir()
    torch.save(torchvision.models.resnet18().state_dict(), p / "weights" / "resnet18.pth")
    (p / "weights" / "notes.txt").write_text("not weights\n")


HUB = "/nowhere/torch-home/hub/checkpoints"


INIT_FORMS = ("a checkpoint or weights file (.pt, .pth, .safetensors), a run id (or run:ID), latest:EXPERIMENT, or "
              "torchvision[:WEIGHTS]")


WEIGHTS_CASES = [
    Case("model.init without a source", args=[*LAUNCH, "model.init.new_head=true"],
         expected="command line 'model.init.new_head=true': model.init.source: missing: name the weights to start "
                  "from, a checkpoint or weights file (.pt, .pth, .safetensors), a run id, latest:EXPERIMENT or "
                  "torchvision; or remove model.init for a fresh random init."),
    Case("model.init file that is not there", args=[*LAUNCH, "model.init.source=weights/resnet18-f37072fd.pth"],
         env={"TORCH_HOME": "/nowhere/torch-home"},
         expected="command line 'model.init.source=weights/resnet18-f37072fd.pth': model.init.source: no file "
                  f"weights/resnet18-f37072fd.pth: model.init.source is {INIT_FORMS}. runner downloads nothing at run "
                  f"time: put the file there, e.g. torchvision's weights, which torch.hub keeps in {HUB}/ (torchvision "
                  "names the file for model.name)."),
    Case("torchvision weights not in torch.hub's cache", args=[*LAUNCH, "model.init.source=torchvision"],
         env={"TORCH_HOME": "/nowhere/torch-home"},
         expected="command line 'model.init.source=torchvision': model.init.source: torchvision's IMAGENET1K_V1 "
                  "weights of resnet18 are not here, and runner downloads nothing at run time: put "
                  "resnet18-f37072fd.pth (from https://download.pytorch.org/models/resnet18-f37072fd.pth) in "
                  f"{HUB}/, torch.hub's cache, or name the file's path in model.init.source."),
    Case("torchvision weights that do not exist", args=[*LAUNCH, "model.init.source=torchvision:IMAGENET1K_V2"],
         expected="command line 'model.init.source=torchvision:IMAGENET1K_V2': model.init.source: torchvision's "
                  "resnet18 has no weights 'IMAGENET1K_V2'; it has: IMAGENET1K_V1 (or DEFAULT)."),
    Case("model.init run id in no store", args=[*LAUNCH, "model.init.source=0123456789abcdef0123456789abcdef"],
         expected="command line 'model.init.source=0123456789abcdef0123456789abcdef': model.init.source: no tracking "
                  "store at {project}/mlflow.db: sqlite:///{project}/mlflow.db does not exist. Name the store the run "
                  "was logged to with --uri (a path or URI), or set $MLFLOW_TRACKING_URI. Nor does checkpoints/ hold "
                  "a checkpoint of run 0123456789abcdef0123456789abcdef."),
    Case("model.init folder", args=[*LAUNCH, "model.init.source=weights"], setup=resnet18_state_dict,
         expected="command line 'model.init.source=weights': model.init.source: weights is a folder; name the weights "
                  "file in it (e.g. weights/last.pt)."),
    Case("model.init file that holds no weights", args=[*LAUNCH, "model.init.source=weights/notes.txt"],
         setup=resnet18_state_dict,
         expected="command line 'model.init.source=weights/notes.txt': model.init.source: weights/notes.txt cannot "
                  "be read as weights (UnpicklingError: invalid load key, 'n'.)."),
    Case("model.init strict with another class count", args=[*LAUNCH, "model.init.source=weights/resnet18.pth"],
         setup=resnet18_state_dict,
         expected="command line 'model.init.source=weights/resnet18.pth': model.init.source: weights/resnet18.pth "
                  "does not fit resnet18 with 2 classes: 2 differ in shape (fc.weight: [1000, 512] in the file, [2, "
                  "512] in the model; fc.bias: [1000] in the file, [2] in the model), 0 missing from the file, 0 not "
                  "in the model. Under model.init.strict: true every key must load; set model.init.new_head=true for "
                  "a fresh classifier (fc.weight, fc.bias), leave keys fresh with model.init.skip patterns, or set "
                  "model.init.strict=false to load what fits."),
    Case("model.init checkpoint that is not best or last", args=[*VALIDATE, "model.init.checkpoint=first"],
         expected="command line 'model.init.checkpoint=first': model.init.checkpoint: 'first' is not valid; expected "
                  "one of: best, last."),
    Case("best checkpoint by a metric that is not an evaluation's",
         args=[*VALIDATE, "trainer.checkpoint_best.metric=train/loss"],
         expected="command line 'trainer.checkpoint_best.metric=train/loss': trainer.checkpoint_best.metric: "
                  "'train/loss' is not an evaluation metric. Did you mean 'eval/loss'? The best checkpoint is chosen by one the run logs after "
                  "each evaluation: eval/top1, eval/top5, eval/loss, or the same of another eval split or the EMA "
                  "model (eval_NAME/top1, ...)."),
    Case("best checkpoint metric misspelt", args=[*VALIDATE, "trainer.checkpoint_best.metric=eval/top_1"],
         expected="command line 'trainer.checkpoint_best.metric=eval/top_1': trainer.checkpoint_best.metric: "
                  "'eval/top_1' is not an evaluation metric. Did you mean 'eval/top1'? The best checkpoint is chosen "
                  "by one the run logs after each evaluation: eval/top1, eval/top5, eval/loss, or the same of another "
                  "eval split or the EMA model (eval_NAME/top1, ...)."),
    Case("best checkpoint without evaluation", args=[*VALIDATE, "trainer.checkpoint_best.mode=min",
                                                     "trainer.eval_every_n_epochs=0"],
         expected="command line 'trainer.checkpoint_best.mode=min': trainer.checkpoint_best: needs an evaluation, but "
                  "trainer.eval_every_n_epochs is 0, so eval/top1 is never measured; set eval_every_n_epochs to 1 or "
                  "more, or remove trainer.checkpoint_best."),
    Case("keep no checkpoint", args=[*VALIDATE, "trainer.checkpoint_keep=0"],
         expected="command line 'trainer.checkpoint_keep=0': trainer.checkpoint_keep: 0 is out of range; it must be "
                  "at least 1."),
]


@pytest.mark.parametrize("case", WEIGHTS_CASES, ids=[c.id for c in WEIGHTS_CASES])
def test_bad_weights(case: Case, project, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def val_and_a_second_val_with_another_class(p: Path) -> None:
    train_and_val(p)
    images(p / "data" / "val_b", classes=3)


EVAL_SPLIT_CASES = [
    Case("eval split name with a slash", args=[*VALIDATE, "data.eval_splits=[val/x]"],
         expected="command line 'data.eval_splits=[val/x]': data.eval_splits: 'val/x' is not a split folder name: "
                  "each entry names one folder under data.root (letters, digits, _ . -, no '/'), logged as "
                  "eval_NAME/... ."),
    Case("the train split as an eval split", args=[*VALIDATE, "data.eval_splits=[train]"],
         expected="command line 'data.eval_splits=[train]': data.eval_splits: 'train' is the train split "
                  "(data.train_split); an eval split holds images the model does not train on."),
    Case("eval split folder that is not there", args=[*LAUNCH, "data.eval_splits=[val_320]"], setup=train_and_val,
         expected=f"command line 'data.eval_splits=[val_320]': data.eval_splits: data/val_320: no such folder; data "
                  f"holds: train, val. {LAYOUT}"),
    Case("eval split with a class the train split lacks", args=[*LAUNCH, "data.eval_splits=[val_b]"],
         setup=val_and_a_second_val_with_another_class,
         expected="command line 'data.eval_splits=[val_b]': data.eval_splits: data/val_b holds 1 class folder(s) "
                  "that the train split data/train lacks: 'c2'. Labels are numbered by the train split's class "
                  "folders (2: c0, c1), so these images would have no label; add the class to the train split (and "
                  "to model.num_classes), or move it out of data/val_b."),
    Case("eval pipeline reading its own folder", args=[*VALIDATE, "data.eval_splits=[val_b]",
                                                       "pipelines.eval.params.data_root=/elsewhere"],
         expected="command line 'data.eval_splits=[val_b]': data.eval_splits: the eval pipeline reads a folder of its "
                  "own (pipelines.eval.params.data_root is set, or it declares no data_root parameter), so it cannot "
                  "read the splits data.eval_splits names; leave data_root unset so that runner binds it to each "
                  "split."),
]


@pytest.mark.parametrize("case", EVAL_SPLIT_CASES, ids=[c.id for c in EVAL_SPLIT_CASES])
def test_bad_eval_split(case: Case, project, capsys, monkeypatch):
    test_bad_input(case, project, capsys, monkeypatch)
