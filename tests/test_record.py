"""wb.record / wb.records through a real Jupyter kernel under papermill."""

from __future__ import annotations

import nbformat
import papermill
import pytest

import workbench as wb
from workbench.nbrecord import MIME


@pytest.mark.slow
def test_record_round_trips_through_an_executed_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import workbench as wb\nwb.record('accuracy', 0.75)\n"
                                          "wb.record('samples', ['a', 'b'])\nwb.record('accuracy', 0.8)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False)
    assert wb.records(out) == {"accuracy": 0.8, "samples": ["a", "b"]}
    outputs = nbformat.read(out, as_version=4).cells[0].outputs
    assert all(MIME in o.data and o.data["text/plain"].startswith(("accuracy", "samples")) for o in outputs)


def test_record_outside_ipython_prints_and_rejects_what_json_cannot_hold(capsys):
    assert wb.record("loss", 1.25) is None
    assert capsys.readouterr().out == "loss = 1.25\n"
    with pytest.raises(ValueError, match="not a finite number"):
        wb.record("loss", float("nan"))
    with pytest.raises(TypeError, match=r"wb.record\('model', value\): Object of type object is not JSON serializable: "
                                         r"record numbers, str, lists, dicts"):
        wb.record("model", object())
    # a name that is not a str was shown as "42 = 1" and read back under 42, or lost
    for name in (42, "", None):
        with pytest.raises(TypeError, match="name must be a non-empty str"):
            wb.record(name, 1)
    assert capsys.readouterr().out == ""
