"""Notebooks 01 (quickstart), 07 (multi-device) and 13 (Gaudi node) under papermill with
``WORKBENCH_DEVICE=hpu`` on the emulated Gaudi. Notebooks 01, 12 and 13 also run on it in the
container rehearsal's smoke (tests/test_rehearsal.py, scripts/rehearse_smoke.py), in a kernel of
the rehearsed venv, with the checks below: where the rehearsal runs in the same session, 01 and
13 run there only.

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

IN_REHEARSAL = {"01_quickstart", "13_gaudi_node"}  # scripts/rehearse_smoke.py's NOTEBOOKS


def after_warmup(summaries: list[dict]) -> list[dict]:
    """What the device counted after warm-up in each run that trained past it, or [] (a
    failure) where none did: every one must show no recompile and a host-sync count."""
    after = [s["after_warmup"] for s in summaries if s.get("after_warmup", {}).get("steps")]
    ok = all(a["recompiles"] == 0 and isinstance(a["host_syncs"], int) for a in after)
    return after if ok else []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["01_quickstart", "07_multi_device", "13_gaudi_node"])
def test_notebook_trains_on_the_emulated_hpu(name, tmp_path, monkeypatch, request):
    if name in IN_REHEARSAL and any(i.path.name == "test_rehearsal.py" for i in request.session.items):
        pytest.skip(f"{name} runs in this session's container rehearsal, with these checks")
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
    assert after_warmup(summaries), [s.get("after_warmup") for s in summaries]
