"""The deployment files hold together: Dockerfile, docker-compose.yml, the SLURM script, docs/deploy.md.

Docker cannot run where these tests run, so nothing is built: the files are parsed and checked
against the repository, pyproject.toml and runner's own command line.
"""
from __future__ import annotations

import fnmatch
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from runner.cli import build_parser, parse
from tests.fixtures.deploy_files import Instruction, parse_dockerfile
from tests.helpers import REPO, run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project supports 3.10
    tomllib = pytest.importorskip("tomli")


COMPOSE = REPO / "docker-compose.yml"


DEPLOY_DOC = REPO / "docs" / "deploy.md"


PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def substitute(text: str, values: dict[str, str]) -> str:
    """$NAME, ${NAME} and ${NAME:-default} as Docker (and compose) expand them."""
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        value = values.get(name)
        if m.group(2) is not None and not value:
            return m.group(2)
        return value or ""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)", one, text)


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    defaults = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    return instructions[last_from:]


def base_image(instructions: list[Instruction]) -> str:
    froms = [ins for ins in instructions if ins.keyword == "FROM"]
    return substitute(froms[-1].args.split()[0], arg_defaults(instructions))


@pytest.mark.parametrize("source, expected", [
    ("FROM a:1\nRUN echo 1 \\\n    && echo 2\n", [("FROM", "a:1"), ("RUN", "echo 1     && echo 2")]),
    ("RUN a \\\n# a comment inside\n\n    b\nUSER x\n", [("RUN", "a     b"), ("USER", "x")]),
    ('# escape=`\nRUN a `\n  b\nCMD ["runner", "--help"]\n', [("RUN", "a   b"), ("CMD", '["runner", "--help"]')]),
    ("# syntax=docker/dockerfile:1\n  from  x:2  \n", [("FROM", "x:2")]),
])
def test_the_parser_joins_continuations_and_drops_comments(source, expected):
    assert [(i.keyword, i.args) for i in parse_dockerfile(source)] == expected


def test_the_parser_rejects_a_dangling_continuation():
    with pytest.raises(ValueError, match="line 2"):
        parse_dockerfile("FROM a:1\nRUN a \\\n")


def test_the_base_image_is_an_ngc_pytorch_image_with_a_pinned_tag(dockerfile):
    image = base_image(dockerfile)
    assert "$" not in image, f"FROM {image}: a build argument without a default"
    m = re.fullmatch(r"nvcr\.io/nvidia/pytorch:(\d\d)\.(\d\d)-py3(@sha256:[0-9a-f]{64})?", image)
    assert m, f"FROM {image}: expected nvcr.io/nvidia/pytorch:YY.MM-py3"
    assert "latest" not in image


def test_the_dali_extra_pairs_with_the_base_images_cuda(dockerfile):
    """NGC PyTorch 25.06 is CUDA 12.9; 25.10 and later are CUDA 13 (docs/deploy.md has the table)."""
    extra = arg_defaults(dockerfile)["DALI_EXTRA"]
    assert extra in PYPROJECT["project"]["optional-dependencies"]
    year, month = map(int, re.search(r":(\d\d)\.(\d\d)-", base_image(dockerfile)).groups())
    if (year, month) >= (25, 10):
        assert extra == "cuda13"
    elif (year, month) <= (25, 6):
        assert extra == "cuda12"


def test_it_runs_as_a_non_root_user_before_its_command(dockerfile):
    stage = final_stage(dockerfile)
    command_at = max(i for i, ins in enumerate(stage) if ins.keyword in ("CMD", "ENTRYPOINT"))
    users = [ins.args.split(":")[0] for ins in stage[:command_at] if ins.keyword == "USER"]
    assert users, "no USER before CMD/ENTRYPOINT: the container would run as root"
    user = users[-1]
    assert substitute(user, arg_defaults(dockerfile)) not in ("root", "0", ""), f"USER {user}"
    # the user is created in the image: by its name, or with the build argument that is its UID
    created = [ins.args for ins in stage if ins.keyword == "RUN" and "useradd" in ins.args]
    assert created, "no useradd"
    m = re.fullmatch(r"\$\{?(\w+)\}?", user)
    if m:
        assert re.search(rf'--uid "?\$\{{?{m.group(1)}\b', created[-1]), f"USER {user} is not the UID useradd gets"
    else:
        assert re.search(rf"\b{user}\b", created[-1]), f"USER {user} is never created"


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Enough of .dockerignore's matching for our patterns: a path is out when it or a folder
    above it matches a pattern; `**/NAME` matches NAME at any depth."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("!"):
            raise AssertionError("negated .dockerignore patterns are not handled by this test")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(Path(p).name, pattern[3:]) for p in prefixes)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if hit:
            return True
    return False


def test_the_ignore_rules_catch_local_state():
    patterns = dockerignore_patterns()
    for path in (".venv/bin/python", ".git/HEAD", "data/synth/x.jpg", "mlflow.db", "checkpoints/a.pt",
                 "bench-out/x/bench.json", "runner/__pycache__/cli.cpython-311.pyc", "mlruns/0/meta.yaml"):
        assert ignored(path, patterns), path
    for path in ("pyproject.toml", "runner/cli.py", "pipelines/imagenet_train.yaml"):
        assert not ignored(path, patterns), path


def test_every_copy_source_exists_and_is_in_the_build_context(dockerfile):
    patterns = dockerignore_patterns()
    copies = [ins for ins in dockerfile if ins.keyword in ("COPY", "ADD")]
    assert copies
    for ins in copies:
        words = ins.exec_form() or ins.args.split()
        flags = [w for w in words if w.startswith("--")]
        assert not any(f.startswith("--from") for f in flags), "multi-stage COPY is not checked here"
        sources = [w for w in words if not w.startswith("--")][:-1]
        assert sources, f"line {ins.line}: COPY without a source"
        for source in sources:
            path = REPO / source
            assert path.exists(), f"line {ins.line}: COPY {source}: no such file in the repository"
            assert not ignored(source.rstrip("/"), patterns), f"line {ins.line}: .dockerignore excludes {source}"


def test_the_command_is_the_runner_console_script(dockerfile):
    """`docker run IMAGE runner launch ...` must run exactly that: no ENTRYPOINT of ours in front
    (NGC's pass-through one stays), and the default command is the console script."""
    stage = final_stage(dockerfile)
    assert not [ins for ins in stage if ins.keyword == "ENTRYPOINT"]
    cmd = [ins for ins in stage if ins.keyword == "CMD"][-1].exec_form()
    assert cmd, "CMD in the shell form would run under /bin/sh -c"
    scripts = PYPROJECT["project"]["scripts"]
    assert cmd[0] in scripts, f"CMD {cmd}: {cmd[0]} is not a console script of pyproject.toml"
    module, _, function = scripts[cmd[0]].partition(":")
    assert callable(getattr(__import__(module, fromlist=[function]), function))
    if cmd[1:] == ["--help"]:
        assert "--help" in build_parser()._option_string_actions
    else:
        build_parser().parse_args(cmd[1:])


def pip_installs(dockerfile: list[Instruction]) -> list[list[str]]:
    """The words after `pip install` in each RUN, one list per pip command."""
    found = []
    for ins in dockerfile:
        if ins.keyword != "RUN":
            continue
        lexer = shlex.shlex(ins.args, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        command: list[str] = []
        for word in [*lexer, ";"]:
            if word not in (";", "&&", "||", "|", "&"):
                command.append(word)
                continue
            if "pip" in command and command[command.index("pip") + 1:command.index("pip") + 2] == ["install"]:
                found.append(command[command.index("pip") + 2:])
            command = []
    return found


def test_the_install_keeps_the_images_torch(dockerfile):
    installs = pip_installs(dockerfile)
    assert installs
    for words in installs:
        named = {w for w in words if not w.startswith(("-", ".", "$"))}
        assert not {n for n in named if re.match(r"(torch|torchvision|nvidia-dali)\b", n)}, words
    with_deps = [words for words in installs if "--no-deps" not in words]
    assert with_deps
    for words in with_deps:  # NGC's pins, passed through "$@" when the file exists
        assert "$@" in words or "--constraint" in words, words
    script = next(ins.args for ins in dockerfile if ins.keyword == "RUN" and "--no-build-isolation \"$@\"" in ins.args)
    assert 'set -- --constraint "$constraints"' in script and "constraints=/etc/pip/constraint.txt" in script


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services(compose: dict) -> dict:
    return compose["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def volume_mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) for each short-syntax volume."""
    mounts = []
    for v in service.get("volumes", []):
        parts = v.split(":") if isinstance(v, str) else [v["source"], v["target"]]
        source = parts[0]
        if source.startswith("${"):  # ${DATA:-./data}:/data:ro, the default may hold no colon
            source, _, rest = v.partition("}:")
            source, parts = source + "}", [source + "}", *rest.split(":")]
        mounts.append((source, parts[1]))
    return mounts


def test_the_stack_has_a_trainer_and_an_mlflow_server(compose):
    assert {"trainer", "mlflow"} <= set(services(compose))


def test_the_trainer_reserves_every_nvidia_gpu(compose):
    devices = services(compose)["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) and d.get("count") == "all"
               for d in devices), devices


def test_the_trainer_mounts_data_from_an_environment_variable_with_a_default(compose):
    mounts = dict((target, source) for source, target in volume_mounts(services(compose)["trainer"]))
    assert "/data" in mounts
    assert re.fullmatch(r"\$\{\w+:-[^}]+\}", mounts["/data"]), mounts["/data"]
    assert "/workspace/experiments" in mounts


def test_the_trainer_logs_to_the_mlflow_service(compose):
    trainer, mlflow = services(compose)["trainer"], services(compose)["mlflow"]
    uri = environment(trainer)["MLFLOW_TRACKING_URI"]
    m = re.fullmatch(r"http://(\w+):(\d+)", uri)
    assert m and m.group(1) == "mlflow", uri
    command = " ".join(mlflow["command"] if isinstance(mlflow["command"], list) else [mlflow["command"]])
    assert re.search(rf"--port[= ]{m.group(2)}\b", command), f"{uri}: the server listens elsewhere ({command})"
    assert re.search(r"--host[= ]0\.0\.0\.0\b", command)
    # MLflow >= 3.5 refuses Host headers other than localhost and private IPs unless allowed
    allowed = substitute(environment(mlflow)["MLFLOW_SERVER_ALLOWED_HOSTS"], {}).split(",")
    assert "mlflow" in allowed and f"mlflow:{m.group(2)}" in allowed and "localhost:*" in allowed


def test_the_mlflow_server_keeps_runs_in_a_named_volume_and_serves_artifacts(compose):
    mlflow = services(compose)["mlflow"]
    command = " ".join(mlflow["command"])
    assert "--serve-artifacts" in command
    backend = re.search(r"--backend-store-uri[= ]sqlite:///(\S+)", command).group(1)
    artifacts = re.search(r"--artifacts-destination[= ](\S+)", command).group(1)
    named = {target: source for source, target in volume_mounts(mlflow) if source in (compose.get("volumes") or {})}
    for path in (backend, artifacts):
        assert any(path.startswith(target + "/") for target in named), f"{path} is not in a named volume"
    published = [substitute(p, {}) for p in mlflow["ports"]]
    assert any(p.endswith(":5000") and ":5000:" in p for p in published), published


def test_the_trainer_waits_for_a_healthy_mlflow(compose):
    trainer, mlflow = services(compose)["trainer"], services(compose)["mlflow"]
    assert trainer["depends_on"]["mlflow"]["condition"] == "service_healthy"
    test = mlflow["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL") and any("/health" in part for part in test)


def test_the_trainer_has_shared_memory_for_its_loaders(compose):
    trainer = services(compose)["trainer"]
    assert trainer.get("ipc") == "host" or trainer.get("shm_size"), "Docker's 64 MiB /dev/shm is too small"


def test_named_volumes_are_declared(compose):
    declared = set(compose.get("volumes") or {})
    for name, service in services(compose).items():
        for source, _target in volume_mounts(service):
            if not source.startswith(("/", ".", "$", "~")):
                assert source in declared, f"{name}: volume {source} is not declared"
    assert declared


def test_the_build_arguments_exist_in_the_dockerfile(compose, dockerfile):
    args = arg_defaults(dockerfile)
    for name, service in services(compose).items():
        build = service.get("build") or {}
        for arg in (build.get("args") or {}) if isinstance(build, dict) else {}:
            assert arg in args, f"{name}: build argument {arg} is not an ARG of the Dockerfile"


def test_the_trainers_experiment_exists_and_validates(compose, capsys, monkeypatch):
    command = services(compose)["trainer"]["command"]
    assert command[:2] == ["runner", "launch"], command
    experiment, overrides = command[2], command[3:]
    assert (REPO / experiment).is_file() and experiment.startswith("experiments/")
    monkeypatch.chdir(REPO)
    code, out, err = run_cli(["validate", experiment, *overrides], capsys)
    assert code == 0, err
    assert out.startswith(f"OK {experiment}")


def documented_runner_commands() -> list[tuple[str, list[str], bool]]:
    """(the line, runner's argv, whole) for each `runner ...` in docs/deploy.md: commands in code
    blocks are whole; code spans in the prose (`runner launch`) may name just the subcommand."""
    text = DEPLOY_DOC.read_text()
    lines = []
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
        lines += [(line.strip(), True) for line in block.replace("\\\n", " ").splitlines()]
    lines += [(span, False) for span in re.findall(r"`(runner [^`]+)`", text)]
    found = []
    for line, whole in lines:
        if not line or line.startswith("#"):
            continue
        segment: list[str] = []
        for word in [*shlex.split(line, comments=True), ";"]:
            if word in ("&&", "||", ";", "|"):
                if "runner" in segment:
                    found.append((line, segment[segment.index("runner") + 1:], whole))
                segment = []
            else:
                segment.append(word)
    return found


COMMANDS = documented_runner_commands()


def test_the_docs_show_the_documented_docker_run_form():
    argvs = [argv for _, argv, whole in COMMANDS if whole]
    assert ["launch", "experiments/resnet50_dali.yaml", "data.root=/data"] in argvs
    assert "runner:local runner launch experiments/resnet50_dali.yaml data.root=/data" in \
        DEPLOY_DOC.read_text().replace("\\\n", " ").replace("    ", " ")
    assert len(COMMANDS) >= 10
    assert "## What was and was not run here" in DEPLOY_DOC.read_text()


@pytest.mark.parametrize("line, argv, whole", COMMANDS, ids=[" ".join(a)[:60] for _, a, _ in COMMANDS])
def test_every_runner_command_in_the_docs_parses(line, argv, whole):
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert argv, line
    if argv == ["--help"]:
        return
    assert argv[0] in subcommands, f"{line}: '{argv[0]}' is not a subcommand ({', '.join(subcommands)})"
    if whole:
        try:
            parse(argv)
        except SystemExit as e:
            pytest.fail(f"{line}: runner's parser rejects it (exit {e.code})")
