"""Intel's Gaudi container, rehearsed in the suite (issue 38, section 3): ``scripts/rehearse.sh``
(also ``make rehearse``) builds an image-like Python holding torch and the bridge's double as
distributions, runs the README's setup on it and then the HPU smoke (scripts/rehearse_smoke.py)
in that venv. The image and the venv are cached outside the checkout, keyed by the setup's
files (docs/tests.md has the times, cold and cached).

The whole-doctor run (its two-card launch checked rank by rank), notebooks 01 and 12 on the
emulated HPU and notebook 13's node run are the smoke's: they ran in tests of their own before,
and would run twice (tests/test_emulated_notebooks.py skips 01 and 13 beside this test)."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

# One line per check of the smoke, each printed "ok  <name>" when it passed: a smoke that ends
# early, or a check that is dropped from it, fails here too
CHECKS = (
    "torch is the image's, unchanged",
    "no upstream DeepSpeed installed",
    "the bridge is the image's distribution (not PYTHONPATH)",
    "wb.train on hpu, lazy",
    "wb.launch(devices=2) on hpu: both ranks trained",
    "wb.doctor(device='hpu'): every check passes",
    "notebook 01_quickstart on hpu under papermill",
    "notebook 12_your_own_trainer on hpu under papermill",
    "notebook 13_gaudi_node on hpu under papermill",
)
LOG = ROOT / "test-artifacts" / "rehearse.log"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # from nothing under a busy suite; about 8 minutes alone (docs/tests.md)
def test_the_container_rehearsal_keeps_torch_and_passes_the_hpu_smoke():
    # the image is made from this interpreter's base Python (a venv's sys.base_prefix)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "rehearse.sh")], cwd=ROOT,
                          env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=1450)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text(done.stdout + done.stderr)  # kept for a look afterwards, with each time
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    passed = [line for line in done.stdout.splitlines() if line.startswith("ok  ")]
    missing = [name for name in CHECKS if not any(line[4:].startswith(name) for line in passed)]
    assert not missing, f"checks that did not pass: {missing}\n{done.stdout[-4000:]}"
