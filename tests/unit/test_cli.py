"""The CLI's own behaviour: `runner models` and RUNNER_DEBUG=1."""
from __future__ import annotations

from tests.helpers import run_cli

TITLE = "(randomly initialised; model.kwargs passes their constructor's arguments)"


def table_rows(out: str) -> list[tuple[str, ...]]:  # the body, not the header (drawn with ┃)
    return [tuple(cell.strip() for cell in line.strip("│").split("│")) for line in out.splitlines()
            if line.startswith("│")]


def test_models_lists_torchvision_then_timm(capsys):
    import timm
    import torchvision

    torchvision_names = sorted(torchvision.models.list_models(module=torchvision.models))
    timm_names = sorted(f"timm/{n}" for n in timm.list_models())
    code, out, _ = run_cli(["models"], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"{len(torchvision_names) + len(timm_names)} models {TITLE}"
    assert table_rows(out) == [(n, "torchvision") for n in torchvision_names] + [(n, "timm") for n in timm_names]
    assert "timm is installed" not in out


def test_models_filter_is_a_substring_or_a_glob(capsys):
    code, out, _ = run_cli(["models", "resnet18"], capsys)
    assert (code, out.splitlines()[0]) == (0, f"6 models matching 'resnet18' {TITLE}")
    assert table_rows(out) == [
        ("resnet18", "torchvision"), ("timm/legacy_seresnet18", "timm"), ("timm/resnet18", "timm"),
        ("timm/resnet18d", "timm"), ("timm/seresnet18", "timm"), ("timm/skresnet18", "timm")]
    code, out, _ = run_cli(["models", "resnet*"], capsys)  # a glob is anchored: wide_resnet50_2, timm/... are not in it
    assert [name for name, _ in table_rows(out)] == ["resnet101", "resnet152", "resnet18", "resnet34", "resnet50"]
    code, out, _ = run_cli(["models", "timm/resnet5?d"], capsys)
    assert table_rows(out) == [("timm/resnet50d", "timm")]
    code, out, _ = run_cli(["models", "efficientnet_b?"], capsys)
    assert [name for name, _ in table_rows(out)] == [f"efficientnet_b{i}" for i in range(8)]
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
