"""runner compare on a real MLflow store whose runs are logged directly through mlflow: known final values,
so the printed n, mean, std, min - max and Welch's p are exact."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.compare import PLAIN, RANDAUG, log_run, three_seeds_each
from tests.helpers import REPO, run_cli

# the closing lines, as docs/comparing.md shows them
LARGER = ("A leads B by 10.00 points of eval/top1 (72.00% vs 62.00%, n = 3 and 3): larger than the spread over seeds "
          "(Welch's t-test p = 0.0078 < 0.05).")


NOT_LARGER = ("A leads B by 1.00 points of eval/top1 (72.50% vs 71.50%, n = 2 and 2): not larger than the "
              "spread over seeds (Welch's t-test p = 0.80 >= 0.05).")


UNKNOWN = ("B leads A by 2.00 points of eval/top1 (72.00% vs 70.00%, n = 1 and 1); the spread over seeds is unknown with "
           "1 run in B and A, so the lead is not tested: run each setting with several seeds (seed=0,1,2).")


ONE_GROUP = ("all 2 runs are one group: there is no other group to compare with; --group-by KEY names the params "
             "that tell groups apart.")


NO_METRIC = "no finished run logged eval/top1: there is no lead to test."


NO_RUNNER_UP = "only group A has finished runs that logged eval/top1: there is no runner-up to test its lead against."


def rows(out: str) -> list[list[str]]:
    """The group table's rows, cells split at runs of two or more spaces."""
    import re

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    table = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        if not line.startswith("─"):
            table.append(re.split(r"\s{2,}", line.strip()))
    return table


def test_groups_by_what_differs_except_seeds_and_prints_exact_spreads(compare_store, capsys):
    uri, client, exp = compare_store
    three_seeds_each(client, exp)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.startswith("6 runs of aug in 2 groups, by pipelines.train.use\n"
                          f"  A = pipelines.train.use={PLAIN} (3 runs)\n"
                          f"  B = pipelines.train.use={RANDAUG} (3 runs)\n")
    assert rows(out) == [
        ["eval top-1 %", "A", "3", "72.00", "2.00", "70.00 – 74.00"],
        ["B", "3", "62.00", "2.65", "60.00 – 65.00"],
        ["images/s", "A", "3", "1,100", "100", "1,000 – 1,200"],
        ["B", "3", "950", "50", "900 – 1,000"],
        ["data wait %", "A", "3", "12.0", "2.0", "10.0 – 14.0"],
        ["B", "3", "20.0", "0.0", "20.0 – 20.0"]]
    # scipy.stats.ttest_ind([.70, .72, .74], [.60, .61, .65], equal_var=False).pvalue = 0.0078004
    assert out.splitlines()[-2] == LARGER
    md = (Path("cmp") / "compare.md").read_text()
    assert f"- A = pipelines.train.use={PLAIN} (3 runs)" in md and "| eval top-1 % | A | 3 | 72.00 | 2.00 |" in md
    png = Path("cmp") / "compare.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_a_lead_within_the_spread_over_seeds_is_not_called_larger(compare_store, capsys):
    uri, client, exp = compare_store
    for seed, (a, b) in enumerate(((0.70, 0.69), (0.75, 0.74))):
        log_run(client, exp, use=PLAIN, seed=seed, top1=a)
        log_run(client, exp, use=RANDAUG, seed=seed, top1=b)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    from scipy.stats import ttest_ind

    p = ttest_ind([0.70, 0.75], [0.69, 0.74], equal_var=False).pvalue
    assert f"{p:#.2g}" == "0.80"
    assert out.splitlines()[-2] == NOT_LARGER


def test_one_run_per_group_says_the_spread_is_unknown(compare_store, capsys):
    uri, client, exp = compare_store
    ids = [log_run(client, exp, use=PLAIN, seed=0, top1=0.70), log_run(client, exp, use=RANDAUG, seed=0, top1=0.72)]
    code, out, err = run_cli(["compare", *ids, "--uri", uri, "--out", "cmp"], capsys)
    assert code == 0, err
    assert ["eval top-1 %", "A", "1", "70.00", "-", "70.00 – 70.00"] in rows(out)
    assert out.splitlines()[-2] == UNKNOWN


def test_runs_that_differ_only_in_seed_are_one_group(compare_store, capsys):
    uri, client, exp = compare_store
    for seed, top1 in enumerate((0.70, 0.72)):
        log_run(client, exp, use=PLAIN, seed=seed, top1=top1)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.startswith("2 runs of aug in 1 group: only seeds differ\n  A = all runs (2 runs)\n")
    assert ["eval top-1 %", "A", "2", "71.00", "1.41", "70.00 – 72.00"] in rows(out)
    assert out.splitlines()[-2] == ONE_GROUP


def test_group_by_names_the_groups_and_what_still_varies_in_them(compare_store, capsys):
    uri, client, exp = compare_store
    three_seeds_each(client, exp, lr="0.1")
    log_run(client, exp, use=PLAIN, seed=3, top1=0.90, lr="0.2")
    log_run(client, exp, use=PLAIN, seed=4, top1=0.10, lr="0.2", status="KILLED")
    code, out, err = run_cli(["compare", "--experiment", "aug", "--group-by", "pipelines.train.use", "--out", "cmp"],
                             capsys)
    assert code == 0, err
    assert out.startswith("8 runs of aug in 2 groups, by pipelines.train.use\n"
                          f"  A = pipelines.train.use={PLAIN} (5 runs)\n"
                          f"  B = pipelines.train.use={RANDAUG} (3 runs)\n"
                          "  also differ within groups: optimizer.lr\n")
    killed = next(line for line in out.splitlines() if "KILLED" in line)
    assert killed.startswith("  left out of the statistics (not FINISHED): ") and killed.endswith(" (KILLED)")
    assert ["eval top-1 %", "A", "4", "76.50", "9.15", "70.00 – 90.00"] in rows(out)
    assert "points of eval/top1 (76.50% vs 62.00%, n = 4 and 3): " in out
    assert "than the spread within groups (Welch's t-test p = " in out
    code, out, err = run_cli(["compare", "--experiment", "aug", "--group-by", "optimizer.lr,pipelines.train.use",
                              "--out", "cmp"], capsys)
    assert code == 0, err
    assert f"  C = optimizer.lr=0.2 pipelines.train.use={PLAIN} (2 runs)\n" in out
    assert ["C", "1", "90.00", "-", "90.00 – 90.00"] in rows(out)  # the KILLED run is not counted
    assert ("C leads A by 18.00 points of eval/top1 (90.00% vs 72.00%, n = 1 and 3); the spread over seeds is unknown "
            "with 1 run in C, so the lead is not tested") in out


def test_without_a_runner_up_nothing_is_tested(compare_store, capsys):
    uri, client, exp = compare_store
    log_run(client, exp, use=PLAIN, seed=0, top1=0.7)
    log_run(client, exp, use=RANDAUG, seed=0, top1=0.9, status="FAILED")
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    assert out.splitlines()[-2] == NO_RUNNER_UP and ["B", "0", "-", "-", "-"] in rows(out)
    log_run(client, exp, use=PLAIN, seed=1, top1=None)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp", "--group-by", "seed"], capsys)
    assert code == 0, err
    assert "  also differ within groups: pipelines.train.use\n" in out
    assert out.splitlines()[-2] == NO_RUNNER_UP  # group B (seed=1) logged no eval/top1
    log_run(client, exp, use=PLAIN, seed=2, top1=None)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp", "--group-by", "model.name",
                              "--limit", "2"], capsys)
    assert code == 0, err
    assert out.splitlines()[-2] == ONE_GROUP
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp", "--group-by", "seed",
                              "--limit", "2"], capsys)
    assert code == 0, err
    assert out.splitlines()[-2] == NO_METRIC


def test_the_docs_show_the_closing_lines_the_code_prints():
    text = (REPO / "docs" / "comparing.md").read_text()
    block = text[text.index("## The closing line"):].split("```")[1]
    assert block.strip().splitlines() == [LARGER, NOT_LARGER, UNKNOWN, ONE_GROUP, NO_METRIC, NO_RUNNER_UP]


def test_documented_commands_parse():
    from runner.cli import build_parser

    blocks = (REPO / "docs" / "comparing.md").read_text().split("```")[1::2]
    lines = [line.split("#")[0].split() for block in blocks for line in block.splitlines()
             if line.startswith("runner ")]
    assert len(lines) == 4
    for words in lines:
        args, extra = build_parser().parse_known_args(words[1:])
        assert all("=" in e for e in extra), words
    assert build_parser().parse_args(lines[-1][1:]).group_by == ["optimizer.lr", "data.batch_size"]


def test_ema_rows_appear_when_runs_logged_them(compare_store, capsys):
    uri, client, exp = compare_store
    log_run(client, exp, use=PLAIN, seed=0, top1=0.70, ema=0.71)
    log_run(client, exp, use=PLAIN, seed=1, top1=0.72, ema=0.75)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    assert ["EMA eval top-1 %", "A", "2", "73.00", "2.83", "71.00 – 75.00"] in rows(out)


@pytest.mark.parametrize("group_by, message", [
    ("pipelines.train.uses", "error: command line: --group-by: no run has a param 'pipelines.train.uses'. Did you "
                             "mean 'pipelines.train.use'? Params that differ between these runs: "
                             "pipelines.train.use, seed, seed.dali_eval, seed.dali_train, seed.reader_shuffle, "
                             "seed.torch."),
    ("use", "error: command line: --group-by: no run has a param 'use'. Did you mean 'pipelines.train.use'?"),
])
def test_group_by_an_unknown_param_is_one_paragraph(compare_store, capsys, group_by, message):
    uri, client, exp = compare_store
    three_seeds_each(client, exp)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--group-by", group_by], capsys)
    assert code == 2 and err.startswith(message) and err.count("\n") == 1, err
    assert not Path("compare-out").exists()


def test_group_by_with_an_empty_key_is_refused(compare_store, capsys):
    uri, client, exp = compare_store
    three_seeds_each(client, exp)
    with pytest.raises(SystemExit) as e:
        run_cli(["compare", "--experiment", "aug", "--group-by", "seed,"], capsys)
    assert e.value.code == 2
    assert "'seed,' has an empty key; write KEY or KEY,KEY" in capsys.readouterr().err


def test_seed_params_are_every_seed_runinfo_logs():
    from types import SimpleNamespace

    from runner.repro.groups import SEED_PARAMS
    from runner.run import runinfo

    assert SEED_PARAMS == {"seed", *runinfo.seeds(SimpleNamespace(seed=0), 2)}


@pytest.mark.parametrize("index, name", [(0, "A"), (25, "Z"), (26, "AA"), (27, "AB"), (26 + 26 * 26, "AAA")])
def test_group_names_run_on_past_z(index, name):
    from runner.repro.groups import group_name

    assert group_name(index) == name


def test_welch_p_is_scipys_and_handles_constant_samples():
    from scipy.stats import ttest_ind

    from runner.repro.stats import p_text, spread, welch_p

    a, b = [0.70, 0.72, 0.74], [0.60, 0.61, 0.65]
    assert welch_p(a, b) == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)
    assert welch_p([1.0, 1.0], [2.0, 2.0]) == 0.0 and welch_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match="at least two values"):
        welch_p([1.0], [1.0, 2.0])
    assert [p_text(p) for p in (0.0078004, 0.41, 3.2e-5, 0.0)] == ["p = 0.0078", "p = 0.41", "p = 3.2e-05", "p = 0"]
    s = spread([0.60, 0.61, 0.65])
    assert (s.n, s.mean, s.low, s.high) == (3, pytest.approx(0.62), 0.60, 0.65) and s.std == pytest.approx(7 ** 0.5 / 100)
    assert spread([0.5]).std is None and spread([]) is None


def test_the_training_streams_wait_is_a_row_when_some_run_logged_it(compare_store, capsys):
    uri, client, exp = compare_store
    for seed, stall in enumerate((0.04, 0.06)):
        log_run(client, exp, use=PLAIN, seed=seed, top1=0.7, stream_wait=stall)
        log_run(client, exp, use=RANDAUG, seed=seed, top1=0.6, stream_wait=0.2)
    code, out, err = run_cli(["compare", "--experiment", "aug", "--out", "cmp"], capsys)
    assert code == 0, err
    table = rows(out)
    at = table.index(["stream wait %", "A", "2", "5.0", "1.4", "4.0 – 6.0"])
    assert table[at + 1] == ["B", "2", "20.0", "0.0", "20.0 – 20.0"]
