"""%load_ext workbench and the %wb magic, in a real IPython shell."""

from __future__ import annotations

import pytest

import workbench as wb

from conftest import wait_for


@pytest.fixture(scope="module")
def ip(ipython):
    ipython.run_line_magic("load_ext", "workbench")
    return ipython


def test_device_and_unknown_command(ip):
    assert ip.run_line_magic("wb", "device").kind == "cpu"
    with pytest.raises(ValueError, match="unknown %wb command 'dance'"):
        ip.run_line_magic("wb", "dance")


@pytest.mark.slow
def test_runs_compare_and_stop(ip, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=32), max_steps=2, live=False)
    b = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=32), max_steps=2, live=False)
    table = ip.run_line_magic("wb", "runs")
    assert {a.name, b.name} <= set(table["run"])
    side = ip.run_line_magic("wb", f"compare {a.name} {b.path}")
    assert list(side.table.columns) == [a.name, b.name]
    assert ip.run_line_magic("wb", "stop") is None
    assert "no run is training" in capsys.readouterr().out
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100000, batch_size=2,
                   max_length=16, live=False, background=True)

    def first_event():
        if not run.thread.is_alive():
            run.wait()  # re-raises the run's error, so a run that fails says why
        return run.events

    wait_for(first_event, 120, "the background run's first event")
    ip.run_line_magic("wb", "stop")
    run.wait(120)
    assert run.status == "stopped"
