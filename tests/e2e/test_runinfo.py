"""What a run records about the code it ran: the commit, and whether the checkout differed from it."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runner.run.runinfo import git_state


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / ".gitignore").write_text("mlflow.db\n")
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "notes a.txt").write_text("n\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_a_clean_checkout_is_clean_while_a_run_writes_its_store_beside_it(repo):
    (repo / "mlflow.db").write_bytes(b"sqlite")
    (repo / "mlflow.db-journal").write_bytes(b"journal")  # exists while the store is being written
    (repo / "checkpoints").mkdir()
    (repo / "checkpoints" / "last.pt").write_bytes(b"w")
    state = git_state(repo)
    assert state["git.dirty"] == "false" and "git.dirty_files" not in state
    assert len(state["git.commit"]) == 40


def test_untracked_code_and_experiments_make_it_dirty(repo):
    (repo / "pkg").mkdir()
    (repo / "pkg" / "extra.py").write_text("y = 2\n")
    (repo / "mine.yaml").write_text("seed: 1\n")
    state = git_state(repo)
    assert state["git.dirty"] == "true"
    assert state["git.dirty_files"] == "mine.yaml, pkg/extra.py"


def test_a_changed_or_renamed_tracked_file_makes_it_dirty(repo):
    (repo / "train.py").write_text("x = 2\n")
    assert git_state(repo)["git.dirty_files"] == "train.py"
    _git(repo, "checkout", "train.py")
    _git(repo, "mv", "notes a.txt", "notes b.txt")
    assert git_state(repo)["git.dirty_files"] == "notes b.txt"


def test_outside_git_nothing_is_recorded(tmp_path):
    assert git_state(tmp_path) == {}
