"""One home for each environment setting: where runs go is decided by ``settings.runs_root``
for every reader and writer (new runs, ``wb.runs()``, ``%wb``, the planner), the cache by
``settings.cache_root``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import workbench as wb
from workbench import settings


def test_runs_root_prefers_the_argument_then_the_variable_then_runs(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_RUNS", raising=False)
    assert settings.runs_root() == Path("runs")
    assert settings.runs_root_named() == "run_dir (default 'runs')"
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "env"))
    assert settings.runs_root() == tmp_path / "env"
    assert settings.runs_root_named() == "WORKBENCH_RUNS"
    assert settings.runs_root(tmp_path / "arg") == tmp_path / "arg"
    assert settings.runs_root_named(tmp_path / "arg") == "run_dir"


def test_a_run_dir_under_home_is_made_where_it_was_checked(monkeypatch, tmp_path):
    """``run_dir="~/..."`` was checked at the expanded path but created as a folder named
    "~" under the working directory; the one function now expands it for both."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, run_dir="~/wb-runs", live=False)
    assert run.path.parent == home / "wb-runs", run.path
    assert not (work / "~").exists()


def test_wb_compare_finds_runs_by_name_where_wb_runs_lists_them(monkeypatch, tmp_path, make_run):
    """``%wb runs`` lists ``$WORKBENCH_RUNS``; ``%wb compare NAME`` looked the names up under
    ./runs instead."""
    from workbench.commands.magics import wb_magic

    root = tmp_path / "elsewhere"
    make_run(root, "20250101-000000-a", summary={"train_loss": 1.0})
    make_run(root, "20250101-000001-b", summary={"train_loss": 0.5})
    monkeypatch.setenv("WORKBENCH_RUNS", str(root))
    monkeypatch.chdir(tmp_path)
    assert len(wb_magic("runs")) == 2
    compared = wb_magic("compare 20250101-000000-a 20250101-000001-b")
    assert [r.path.parent for r in compared.runs] == [root, root]


def test_the_cache_is_the_variable_or_the_users_cache_folder(monkeypatch, tmp_path):
    from workbench.data.bundled import cache_dir

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "c"))
    assert settings.cache_root() == cache_dir() == tmp_path / "c"
    monkeypatch.delenv("WORKBENCH_CACHE")
    assert settings.cache_root() == Path(os.path.expanduser("~")) / ".cache" / "gaudi-workbench"


@pytest.mark.parametrize("name", sorted(settings.VARIABLES))
def test_every_variable_says_what_it_means(name):
    assert len(settings.VARIABLES[name]) > 20 and name == name.upper()


def test_get_reads_a_listed_variable_and_refuses_an_unlisted_one(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert settings.get("RANK") is None and settings.get("RANK", "0") == "0"
    assert not settings.is_set("RANK")
    monkeypatch.setenv("RANK", "")
    assert settings.is_set("RANK") and settings.get("RANK", "0") == ""
    monkeypatch.setenv("RANK", "3")
    from workbench.backends.torchrun import world

    assert world()[0] == 3
    with pytest.raises(KeyError, match="NOT_LISTED_VAR is not in workbench/settings.py VARIABLES"):
        settings.get("NOT_LISTED_VAR")
    with pytest.raises(KeyError, match="add it there"):
        settings.is_set("NOT_LISTED_VAR")
