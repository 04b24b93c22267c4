# syntax=docker/dockerfile:1
# runner on NVIDIA's PyTorch container (NGC). docs/deploy.md is the guide; in short:
#
#   docker build -t runner:local .
#   docker run --gpus all --ipc=host -v /path/to/imagenet:/data:ro -v runner-mlflow:/mlflow \
#       runner:local runner launch experiments/resnet50_dali.yaml data.root=/data
#
# Base image: NGC PyTorch 26.09 = Ubuntu 24.04, Python 3.12, CUDA 13.4, PyTorch
# 2.14.0a0+b2c75dd062.nv26.09 (torch.version.cuda == "13.4"), cuDNN 9.26, NCCL 2.31.
# DALI's wheels are built per CUDA major and must match the CUDA that torch was built for, so
# this image pairs with the `cuda13` extra (nvidia-dali-cuda130). A CUDA 12 tag such as 25.06
# (CUDA 12.9, PyTorch 2.8) pairs with `cuda12`; the build checks the pairing:
#   --build-arg BASE_IMAGE=nvcr.io/nvidia/pytorch:25.06-py3 --build-arg DALI_EXTRA=cuda12
# CUDA 13 needs an R580 or newer driver on the host (NGC's forward-compatibility mode covers
# older datacenter drivers). Sources for each number: docs/deploy.md, "Which base image".
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:26.09-py3
FROM ${BASE_IMAGE}

ARG DALI_EXTRA=cuda13
# The user that runs training. Build with the host user's IDs (--build-arg RUNNER_UID=$(id -u)
# --build-arg RUNNER_GID=$(id -g)) so that files written to bind mounts belong to that user.
ARG RUNNER_UID=1000
ARG RUNNER_GID=1000

# NGC images carry a user `ubuntu` with UID 1000: whoever holds the wanted UID makes way. The
# directories that become volumes are created here, owned by that user, because an empty named
# volume takes the owner of the directory it is mounted on.
RUN set -eu; \
    if [ "$RUNNER_UID" -eq 0 ] || [ "$RUNNER_GID" -eq 0 ]; then \
        echo "RUNNER_UID/RUNNER_GID must not be 0: the image runs as a non-root user" >&2; exit 1; \
    fi; \
    holder=$(getent passwd "$RUNNER_UID" || true); \
    if [ -n "$holder" ]; then userdel "${holder%%:*}"; fi; \
    group=$(getent group "$RUNNER_GID" || true); \
    group=${group%%:*}; \
    if [ -z "$group" ]; then groupadd --gid "$RUNNER_GID" runner; group=runner; fi; \
    useradd --uid "$RUNNER_UID" --gid "$group" --create-home --shell /bin/bash runner; \
    install -d -o runner -g "$group" /workspace /workspace/checkpoints /data /mlflow

# Dependencies first, from pyproject.toml alone, so that editing the code does not re-run this
# layer: an empty stand-in package takes the place of runner/ until the code is copied below.
#
# The image's torch, torchvision and numpy must stay: /etc/pip/constraint.txt (NGC, since 25.03)
# pins every package the image was built with, and passing it keeps pip from replacing them
# (their NVIDIA builds, 2.14.0a0 and so on, satisfy torch>=2.4). The one exception is DALI:
# the image's own DALI is kept when it meets pyproject's floor (nvidia-dali-cuda130>=2.4), and
# replaced by the newest release on PyPI when it does not. DALI 2.4.0 reached PyPI in October 2026,
# after 26.09 was built, so with this tag expect the replacement. For that, the constraint lines
# of DALI and of the NVIDIA codec wheels it depends on are dropped; nothing else is unpinned.
# (pyproject.toml's ranges are the pins here, hence hadolint's DL3013 is off for this step.)
WORKDIR /opt/runner
COPY pyproject.toml ./
# hadolint ignore=DL3013
RUN set -eu; \
    cuda=$(python3 -c "import torch; print(torch.version.cuda.split('.')[0])"); \
    if [ "$DALI_EXTRA" != "cuda$cuda" ]; then \
        echo "DALI_EXTRA=$DALI_EXTRA, but this image's torch is built for CUDA $cuda: use cuda$cuda" >&2; \
        exit 1; \
    fi; \
    constraints=/etc/pip/constraint.txt; \
    if [ -f "$constraints" ]; then \
        sed -i -E '/^nvidia[-_.](dali|nvimgcodec|nvjpeg|nvtiff|libnvcomp)/Id' "$constraints"; \
        set -- --constraint "$constraints"; \
    fi; \
    mkdir runner && touch runner/__init__.py; \
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-build-isolation "$@" \
        ".[$DALI_EXTRA]"; \
    rm -rf runner build runner.egg-info; \
    python3 -c "import torch, nvidia.dali as d; print('torch', torch.__version__, 'DALI', d.__version__)"

# The package itself; its dependencies are in place already.
COPY runner/ runner/
RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-build-isolation --no-deps \
        --force-reinstall . \
    && rm -rf build runner.egg-info

# The working directory: experiments/ and pipelines/ as shipped (bind-mount your own over them),
# checkpoints/ (trainer.checkpoint_dir), and the MLflow store in /mlflow. A local store keeps its
# database where MLFLOW_TRACKING_URI says but its artifacts in ./mlruns of the working directory,
# so ./mlruns points into /mlflow too and one volume holds a run whole. Compose points
# MLFLOW_TRACKING_URI at its tracking server instead.
WORKDIR /workspace
COPY pipelines/ pipelines/
COPY experiments/ experiments/
RUN ln -s /mlflow /workspace/mlruns

ENV HOME=/home/runner \
    MLFLOW_TRACKING_URI=sqlite:////mlflow/mlflow.db \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1

# The data, the MLflow store and the checkpoints live outside the container's own layer.
# /workspace/experiments is not a VOLUME: the image ships the experiments; a bind mount
# replaces them.
VOLUME ["/data", "/mlflow", "/workspace/checkpoints"]

# Numeric, so that Kubernetes' runAsNonRoot can tell it is not root.
USER ${RUNNER_UID}:${RUNNER_GID}

# NGC's ENTRYPOINT (/opt/nvidia/nvidia_entrypoint.sh: the banner and CUDA forward compatibility,
# then exec "$@") is kept, so the command after the image name runs as given:
#   docker run ... runner:local runner launch experiments/resnet50_dali.yaml data.root=/data
CMD ["runner", "--help"]
