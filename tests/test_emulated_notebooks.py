"""Notebooks 01 (quickstart), 07 (multi-device) and 13 (Gaudi node) under papermill with
``WORKBENCH_DEVICE=hpu`` on the emulated Gaudi. Notebooks 01, 12 and 13 also run on it in the
container rehearsal's smoke (tests/test_rehearsal.py, scripts/rehearse_smoke.py), in a kernel of
the rehearsed venv.

The kernel is its own process (papermill starts it with this environment), so the emulated
device never enters pytest's process. Each notebook's recorded results must pass the same
check as on the CPU (tests/test_notebooks.py), every run it made ran on the HPU, and every
run that trained past warm-up recompiled 0 times after it and counted its host syncs.
"""

import json

import papermill
import pytest
from emulated_hpu import environment
from test_notebooks import CHECKS, ROOT

import workbench as wb


@pytest.mark.slow
@pytest.mark.parametrize("name", ["01_quickstart", "07_multi_device", "13_gaudi_node"])
def test_notebook_trains_on_the_emulated_hpu(name, tmp_path, monkeypatch):
    for key, value in environment(tmp_path, WORKBENCH_DEVICE="hpu").items():
        monkeypatch.setenv(key, value)
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(out),
                               kernel_name="python3", cwd=str(tmp_path), progress_bar=False)
    records = wb.records(out)
    assert CHECKS[name](records), records
    summaries = [json.loads(p.read_text()) for p in tmp_path.rglob("runs/*/summary.json")]
    kinds = {s["device"]["kind"] for s in summaries if s.get("device")}
    # notebook 07 leaves one summary without a device (which run: not yet checked)
    assert kinds == {"hpu"}, kinds
    # what the device counted after warm-up: no recompile, and host syncs counted
    after = [s["after_warmup"] for s in summaries if s.get("after_warmup", {}).get("steps")]
    assert after, "a run trained past warm-up"
    assert all(a["recompiles"] == 0 for a in after), after
    assert all(isinstance(a["host_syncs"], int) for a in after), after
