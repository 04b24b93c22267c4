"""The CLI's own behaviour: `runner models` and RUNNER_DEBUG=1."""
from __future__ import annotations

from tests.conftest import run_cli

TITLE = "(torchvision architectures, randomly initialised; model.kwargs passes their constructor's arguments)"


def table_rows(out: str) -> list[str]:
    return [line.strip("│ ") for line in out.splitlines() if line.startswith("│")]


def test_models_lists_the_registry(capsys):
    code, out, _ = run_cli(["models"], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"20 models {TITLE}"
    assert table_rows(out) == [
        "convnext_tiny", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "mobilenet_v2",
        "mobilenet_v3_large", "mobilenet_v3_small", "regnet_y_1_6gf", "regnet_y_400mf", "resnet101", "resnet152",
        "resnet18", "resnet34", "resnet50", "resnext50_32x4d", "swin_t", "vit_b_16", "vit_b_32", "wide_resnet50_2"]


def test_models_filter_is_a_substring_or_a_glob(capsys):
    code, out, _ = run_cli(["models", "resnet"], capsys)
    assert (code, out.splitlines()[0]) == (0, f"6 models matching 'resnet' {TITLE}")
    assert table_rows(out) == ["resnet101", "resnet152", "resnet18", "resnet34", "resnet50", "wide_resnet50_2"]
    code, out, _ = run_cli(["models", "resnet*"], capsys)  # a glob is anchored: wide_resnet50_2 is not in it
    assert table_rows(out) == ["resnet101", "resnet152", "resnet18", "resnet34", "resnet50"]
    code, out, _ = run_cli(["models", "*_b?"], capsys)
    assert table_rows(out) == ["efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3"]
    code, out, _ = run_cli(["models", "zzz"], capsys)
    assert (code, out.splitlines()[0], table_rows(out)) == (0, f"0 models matching 'zzz' {TITLE}", [])


PARAGRAPH = ("error: bad.yaml:2: YAML syntax error: expected ',' or ']', but got '<stream end>' (while parsing a flow "
             "sequence that starts on line 1). Check that the '[' on line 1 is closed with ']' and its items are "
             "separated by commas.")


def test_an_error_is_one_paragraph(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNNER_DEBUG", raising=False)
    (tmp_path / "bad.yaml").write_text("model: [1\n")
    code, out, err = run_cli(["validate", "bad.yaml"], capsys)
    assert (code, out, err.splitlines()) == (2, "", [PARAGRAPH])


def test_runner_debug_shows_the_hidden_cause(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNNER_DEBUG", "1")
    (tmp_path / "bad.yaml").write_text("model: [1\n")
    code, out, err = run_cli(["validate", "bad.yaml"], capsys)
    lines = err.splitlines()
    assert (code, out, lines[0], lines[-1]) == (2, "", "Traceback (most recent call last):", PARAGRAPH)
    # the parser's exception, which `raise ConfigError(...) from None` leaves out of the paragraph
    assert "yaml.parser.ParserError: while parsing a flow sequence" in lines
    assert "During handling of the above exception, another exception occurred:" in lines
    assert "runner.errors.ConfigError: " + PARAGRAPH.removeprefix("error: ") in lines
