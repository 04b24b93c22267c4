"""The experiment schema: one frozen dataclass per YAML section.

Field comments document each key for the people who write experiments, so they say what a value
means, not how it is used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from runner.config.typed import bounded

Precision = Literal["fp32", "bf16", "fp16"]


@dataclass(frozen=True, kw_only=True)
class ModelInitConfig:
    """Weights the model starts from instead of its random init (fine-tuning); --resume ignores it."""
    # a runner checkpoint or torchvision/timm weights file (.pt, .pth, .safetensors); a run id, or run:ID, whose
    # logged checkpoint is fetched from tracking.uri; latest:EXPERIMENT, that experiment's newest finished run;
    # torchvision[:WEIGHTS], torchvision's file for model.name from torch.hub's cache (never downloaded)
    source: str = ""
    checkpoint: Literal["best", "last"] = "best"  # which checkpoint of a run
    uri: str | None = None                      # the store holding that run; null: tracking.uri's
    skip: list[str] = field(default_factory=list)  # key patterns (fnmatch, e.g. "fc.*") left at their fresh init
    new_head: bool = False                      # leave the classifier fresh: another class count or meaning
    strict: bool = True                         # every key must load and fit; false: load what fits, list the rest


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name: str = "resnet50"                      # a name from `runner models`: torchvision's, or timm/<name>
    num_classes: int = bounded(1000, ge=1)
    # extra keyword arguments of the model's constructor (dropout, drop_path_rate, ...), checked against it
    kwargs: dict[str, Any] = field(default_factory=dict)
    init: ModelInitConfig | None = None         # start from these weights (null: a fresh random init)


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """An optimizer from timm.optim's factory (create_optimizer_v2), the torch one where torch has it."""
    name: str = "sgd"                           # sgd, adamw, lamb, lars, ...: `runner optimizers` lists them
    lr: float = bounded(0.1, gt=0)              # for a global batch of `lr_reference_batch`
    lr_reference_batch: int | None = bounded(None, ge=1)  # linear scaling rule; null: lr as written
    momentum: float = bounded(0.9, ge=0, lt=1)  # optimizers with momentum (sgd, lars, ...)
    nesterov: bool = False                      # optimizers that take it (sgd, lars); true: Nesterov momentum
    weight_decay: float = bounded(1e-4, ge=0)
    betas: tuple[float, float] | None = bounded(None, ge=0, lt=1)  # adam-like optimizers; null: the optimizer's own
    eps: float | None = bounded(None, gt=0)     # null: the optimizer's own (1e-8 for adamw, 1e-6 for lamb)
    no_decay_on_norm_and_bias: bool = True      # no weight decay on 1-d parameters: norm scales and biases
    # layer-wise lr decay: the lr of the k-th layer group from the head is lr x layer_decay**k (timm models only)
    layer_decay: float | None = bounded(None, gt=0, le=1)
    # more keyword arguments of the optimizer's constructor, checked against it, e.g. {trust_clip: true} for lamb
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    name: str = "cosine"                        # constant | step | cosine | linear | onecycle
    warmup_epochs: float = bounded(0.0, ge=0)   # linear warm-up before the schedule
    warmup_start_factor: float = bounded(0.1, gt=0, le=1)
    step_epochs: int = bounded(30, ge=1)        # step: decay every this many epochs
    gamma: float = bounded(0.1, gt=0, le=1)     # step: decay factor
    min_lr_factor: float = bounded(0.0, ge=0, le=1)  # cosine, linear: floor, as a fraction of the peak lr
    pct_start: float = bounded(0.3, gt=0, lt=1)  # onecycle: share of steps spent rising


@dataclass(frozen=True, kw_only=True)
class EmaConfig:
    """An exponential moving average of the model's weights (timm's ModelEmaV3), kept in fp32 on the device
    and evaluated beside the trained weights; BatchNorm statistics are averaged too (docs/recipes.md)."""
    decay: float = bounded(0.9998, gt=0, lt=1)  # per update: ema = decay * ema + (1 - decay) * weights
    every_n_steps: int = bounded(1, ge=1)       # update after every Nth optimizer step
    # warm-up: decay = 1 - (1 + step / warmup_gamma) ** -warmup_power, between min_decay and decay
    warmup: bool = False
    warmup_gamma: float = bounded(1.0, gt=0)
    warmup_power: float = bounded(2 / 3, gt=0)
    min_decay: float = bounded(0.0, ge=0, lt=1)


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """The training loss; trainer.label_smoothing smooths its one-hot targets (mixed targets come smoothed). eval/loss
    is the cross entropy under either, so runs trained with either compare."""
    name: Literal["cross_entropy", "bce"] = "cross_entropy"  # bce: timm's BinaryCrossEntropy, a sigmoid per class
    # bce: targets above this become 1 and the rest 0, after smoothing and mixing (timm --bce-target-thresh); null: none
    target_threshold: float | None = bounded(None, ge=0, lt=1)
    sum_classes: bool = False                   # bce: sum over classes before the batch mean (timm --bce-sum)
    pos_weight: float | None = bounded(None, gt=0)  # bce: weight of the positive term (timm --bce-pos-weight)


@dataclass(frozen=True, kw_only=True)
class CheckpointBestConfig:
    metric: str = "eval/top1"                   # an epoch metric: eval/top1, eval/top5, eval/loss, eval_NAME/...
    mode: Literal["max", "min"] = "max"         # max: higher is better (accuracy); min: lower (a loss)


@dataclass(frozen=True, kw_only=True)
class StopAtConfig:
    """Stop training once an evaluation reaches a value (a time-to-accuracy budget); the run ends FINISHED."""
    metric: str = "eval/top1"                   # an epoch metric: eval/top1, eval_ema/top1, eval/loss, ...
    value: float | None = None                  # e.g. 0.75 for 75% top-1
    mode: Literal["max", "min"] = "max"         # max: reached at metric >= value (accuracy); min: at <= value (a loss)


@dataclass(frozen=True, kw_only=True)
class TimeToConfig:
    """Wall seconds and epochs until an evaluation first reaches each value, logged as time_to/METRIC/VALUE/seconds
    and .../epochs (shown by runner compare)."""
    metric: str = "eval/top1"
    values: list[float] = field(default_factory=list)  # e.g. [0.5, 0.7, 0.75]
    mode: Literal["max", "min"] = "max"


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    epochs: int = bounded(1, ge=1)
    max_steps: int | None = bounded(None, ge=1)  # stop after this many optimizer steps in all
    stop_at: StopAtConfig | None = None         # stop once an evaluation reaches a value
    time_to: TimeToConfig | None = None         # seconds and epochs to each value of an evaluation metric
    # images per optimizer step over all processes: a whole multiple of data.batch_size x processes, the rest
    # made up by accumulating gradients over that many batches per process (null: data.batch_size x processes)
    global_batch_size: int | None = bounded(None, ge=1)
    accelerator: Literal["auto", "cpu", "gpu"] = "auto"  # gpu: fail when the machine has none
    devices: int | Literal["auto"] = bounded("auto", ge=1)  # processes on this node: every GPU, or 1 on CPU
    precision: Precision = "fp32"
    channels_last: bool = False
    compile: bool = False
    # torch.compile's mode; reduce-overhead and max-autotune replay CUDA graphs, so the Python loop launches less
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    deterministic: bool = False
    # the CUDA stream training runs on: high puts the model's kernels ahead of DALI's (default priority) whenever
    # both wait for the GPU's multiprocessors; the kernels and their order, so the results, are the same
    stream_priority: Literal["default", "high"] = "default"
    label_smoothing: float = bounded(0.0, ge=0, lt=1)
    loss: LossConfig = field(default_factory=LossConfig)
    grad_clip_norm: float | None = bounded(None, gt=0)
    ema: EmaConfig | None = None                # an average of the weights, evaluated beside them (eval_ema/*)
    log_every_n_steps: int = bounded(20, ge=1)
    eval_every_n_epochs: int = bounded(1, ge=0)       # 0: no evaluation
    # test-time augmentation at every evaluation: flip, each image also mirrored and the two logits averaged
    eval_tta: Literal["none", "flip"] = "none"
    checkpoint_every_n_epochs: int = bounded(1, ge=0)  # 0: only at the end (and on a stop signal)
    checkpoint_dir: str = "checkpoints"
    # the checkpoint kept as "best", by an epoch metric (eval/top1, eval/loss, ...); null: keep only the latest
    checkpoint_best: CheckpointBestConfig | None = None
    checkpoint_keep: int = bounded(1, ge=1)     # latest checkpoints the run's artifact store keeps (and the best)
    checkpoint_log: bool = True                 # log checkpoints to the run's artifact store (tracking.uri)
    # multi-node: passed to torchrun's rendezvous
    nnodes: int = bounded(1, ge=1)
    node_rank: int = bounded(0, ge=0)
    rdzv_endpoint: str | None = None            # HOST:PORT of node 0
    rdzv_backend: str = "c10d"
    rdzv_id: str = "runner"
    max_restarts: int = bounded(0, ge=0)


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """The generated dataset used when `data.root` is unset (`runner data synth`)."""
    dir: str = "data/synth"
    classes: int = bounded(10, ge=2)
    per_class: int = bounded(100, ge=1)
    eval_per_class: int = bounded(20, ge=1)
    min_side: int = bounded(400, ge=16)
    max_side: int = bounded(640, ge=16)
    quality: int = bounded(90, ge=1, le=100)


@dataclass(frozen=True, kw_only=True)
class TorchvisionConfig:
    """The baseline loader: transforms written as calls, e.g. "RandomResizedCrop(224)"."""
    train: list[str] = field(default_factory=lambda: [
        "RandomResizedCrop(224)", "RandomHorizontalFlip()", "ToTensor()",
        "Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])"])
    eval: list[str] = field(default_factory=lambda: [
        "Resize(256)", "CenterCrop(224)", "ToTensor()",
        "Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])"])
    num_workers: int | Literal["auto"] = bounded("auto", ge=0)  # auto: CPU cores per process - 1
    pin_memory: bool = True
    prefetch_factor: int = bounded(4, ge=1)
    persistent_workers: bool = True


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    loader: Literal["dali", "torchvision", "synthetic"] = "dali"
    root: str | None = None                     # ImageFolder root holding the two splits
    train_split: str = "train"
    eval_split: str = "val"
    # more eval sets: folders under data.root, each evaluated like eval_split at every evaluation and logged
    # as eval_NAME/... (eval_split keeps eval/...), e.g. [val_320]
    eval_splits: list[str] = field(default_factory=list)
    batch_size: int = bounded(256, ge=1)        # per process
    eval_batch_size: int | None = bounded(None, ge=1)
    num_threads: int | Literal["auto"] = bounded("auto", ge=1)  # DALI CPU threads per process
    prefetch: int = bounded(2, ge=1)            # DALI prefetch queue depth
    # cores kept for the training loop's own threads: DALI's CPU threads are pinned to the others (0: no pinning)
    reserved_cores: int = bounded(0, ge=0)
    # niceness of DALI's CPU threads: above 0, the training thread (nice 0) takes a core from them when it wakes
    dali_nice: int = bounded(0, ge=0, le=19)
    image_size: int = bounded(224, ge=8)        # synthetic loader's images
    skip_bad_files: bool = True                 # leave out files listed by `runner data check` (DALI loader)
    # repeated augmentation (timm's RepeatAugSampler, --aug-repeats): each train image this many times an epoch, its
    # copies on different processes, an epoch as long as without (so it sees 1/repeats of the images); 1: off
    repeats: int = bounded(1, ge=1)
    synth: SynthConfig = field(default_factory=SynthConfig)
    torchvision: TorchvisionConfig = field(default_factory=TorchvisionConfig)


HYBRID = "train.hybrid"  # the pipeline role of a hybrid train pipeline's copy (runner compile --pipeline, metrics)


@dataclass(frozen=True, kw_only=True)
class HybridConfig:
    """A second copy of the train graph, with `params` changed, that makes `share` of every batch: e.g. JPEG
    decode on CPU threads for most images while the GPU decodes the rest (docs/pipelines.md)."""
    share: float = bounded(0.75, gt=0, lt=1)    # of every batch, made by the copy
    params: dict[str, Any] = field(default_factory=dict)  # the copy's params, e.g. {decode_device: cpu}
    num_threads: int | Literal["auto"] = bounded("auto", ge=1)  # the copy's DALI CPU threads; auto: data.num_threads
    # which files the copy gets: a random deal, or the split's smallest (largest) files, e.g. the cheapest
    # decodes for a copy that decodes on the CPU
    deal: Literal["random", "smallest", "largest"] = "random"


@dataclass(frozen=True, kw_only=True)
class MixConfig:
    """Mixup and CutMix on each training batch, on the device after the loader, as timm's Mixup defines them:
    each image is mixed with the one at the mirrored place in the batch, and the targets become
    lam * onehot(own label) + (1 - lam) * onehot(partner's label), smoothed by trainer.label_smoothing. Under
    mixing, train/top1 counts a sample right when its top class is the label with the larger weight
    (docs/recipes.md)."""
    mixup_alpha: float = bounded(0.0, ge=0)     # mixup's lam ~ Beta(alpha, alpha); 0: no mixup
    cutmix_alpha: float = bounded(0.0, ge=0)    # cutmix's lam ~ Beta(alpha, alpha); 0: no cutmix
    # cutmix box sides as [min, max] fractions of the image's, drawn uniformly (instead of from lam; alpha 1)
    cutmix_minmax: tuple[float, float] | None = bounded(None, gt=0, le=1)
    prob: float = bounded(1.0, ge=0, le=1)      # chance that a batch (an image, in elem/pair mode) is mixed
    switch_prob: float = bounded(0.5, ge=0, le=1)  # chance of cutmix rather than mixup when both are on
    # batch: one lam (and box) for the whole batch; elem: one per image; pair: one per mirrored pair of images
    mode: Literal["batch", "elem", "pair"] = "batch"
    correct_lam: bool = True                    # lam from the box's area after clipping at the image border


@dataclass(frozen=True, kw_only=True)
class ResolutionConfig:
    """Progressive resizing as FFCV's ResNet recipes do it: the train pipeline's `param` (its output side) is `min` up
    to epoch `start_epoch`, `max` from `end_epoch`, and in between the straight line from one to the other rounded to
    a multiple of `multiple`; epochs count from 0, as FFCV's do (docs/recipes.md)."""
    param: str = "size"                         # the train pipeline's param that sets its output side, in px
    min: int = bounded(160, ge=8)               # FFCV resolution.min_res
    max: int = bounded(192, ge=8)               # FFCV resolution.max_res
    start_epoch: int = bounded(0, ge=0)         # FFCV resolution.start_ramp
    end_epoch: int = bounded(1, ge=1)           # FFCV resolution.end_ramp
    multiple: int = bounded(32, ge=1)           # sides in between are rounded to a multiple of this


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """A pipeline graph: a file from pipelines/ (`use`) with `params` overridden, or inline steps."""
    use: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    steps: list[str] | None = None
    outputs: list[str] | None = None
    description: str = ""
    hybrid: HybridConfig | None = None          # train only
    mix: MixConfig | None = None                # train only: mixup / cutmix of each batch
    resolution: ResolutionConfig | None = None  # train only: the output side as a schedule over the epochs


@dataclass(frozen=True, kw_only=True)
class PipelinesConfig:
    train: PipelineConfig = field(default_factory=PipelineConfig)
    eval: PipelineConfig | None = None


@dataclass(frozen=True, kw_only=True)
class TrackingConfig:
    enabled: bool = True
    uri: str | None = None                      # null: $MLFLOW_TRACKING_URI, else ./mlflow.db
    experiment: str = "runner"
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SlurmConfig:
    """How `runner sweep --launcher slurm` asks SLURM for each child's job (docs/deploy.md)."""
    partition: str | None = None                # null: the cluster's default partition
    time: str | None = None                     # each child's time limit: MM, HH:MM:SS or D-HH:MM:SS; null: the default
    mem: str | None = None                      # memory per node, e.g. 64G; null: the partition's default
    account: str | None = None
    qos: str | None = None
    # more sbatch options, each as written on sbatch's command line, e.g. [--constraint=h100, --exclusive]
    options: list[str] = field(default_factory=list)
    # shell lines every job runs before runner, e.g. [module load cuda, source /shared/venv/bin/activate]
    setup: list[str] = field(default_factory=list)
    requeue: bool = True                        # a preempted or failed node's job goes back in the queue and resumes
    # with `time` set: SIGUSR1 to the job this many seconds before the limit: the child checkpoints, the job requeues
    grace_s: int = bounded(120, ge=10)
    python: str | None = None                   # the interpreter jobs run runner with; null: the one that submits


@dataclass(frozen=True, kw_only=True)
class LauncherConfig:
    """Where and how `runner sweep` runs its children; `runner launch` ignores it, and no run logs it as a param."""
    name: Literal["local", "slurm"] = "local"   # local: this machine; slurm: one job per child (job arrays)
    # children at once: local, default 1 (GPUs / gpus_per_run when that is set); slurm, the array's limit (null: none)
    parallel: int | None = bounded(None, ge=1)
    # GPUs each child gets (CUDA_VISIBLE_DEVICES locally, --gpus-per-node on SLURM); null: local, every visible GPU;
    # slurm, trainer.devices when it is a number and trainer.accelerator is not cpu, else none
    gpus_per_run: int | None = bounded(None, ge=0)
    # CPU cores each child gets (pinned locally, --cpus-per-task on SLURM); null: local, the cores split evenly
    # between the children that run at once; slurm, the partition's default
    cpus_per_run: int | None = bounded(None, ge=1)
    dir: str = "sweeps"                         # where each sweep's folder goes: frozen children, logs, checkpoints
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


@dataclass(frozen=True, kw_only=True)
class Experiment:
    name: str = ""
    description: str = ""
    seed: int = bounded(0, ge=0)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    pipelines: PipelinesConfig = field(default_factory=PipelinesConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
