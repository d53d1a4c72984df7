"""The pickers and the train form, driven through their traits without a browser."""

from __future__ import annotations

import html
import re
import threading

import pytest

import workbench
from workbench.forms import composite
from workbench.forms import form as form_module
from workbench.forms.form import train_form
from workbench.forms.pickers import HUB, LOCAL, pick_dataset, pick_model

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_public_names_come_from_their_views():
    """``wb.pick_model`` and friends are the objects of ``workbench.forms``' pickers and form."""
    assert (workbench.pick_model, workbench.pick_dataset) == (pick_model, pick_dataset)
    assert workbench.train_form is train_form


@pytest.fixture(scope="module")
def topic():
    """One docstrings-topic picker for the read-only checks (tokenising takes a moment)."""
    return pick_dataset("docstrings-topic")


def test_model_picker_follows_family_size_and_task():
    p = pick_model()
    assert p.value.name == "bert-tiny" and p.value.task == "classification"
    p.family.value = "gpt2"
    assert p.task.options == ("causal_lm", "classification")
    assert p.value.name == "gpt2-tiny" and p.value.task == "causal_lm"
    p.size.value = "small"
    assert p.value.source == "openai-community/gpt2"
    assert 124e6 < p.plan.num_params < 125e6
    assert "124.4M</b> parameters" in p.summary.value
    assert re.search(r"needs [\d.]+ GiB per device", p.summary.value)
    assert ("fits" in p.summary.value) and p.fits is not None
    assert "H100" in p.devices.value and "Gaudi2" in p.devices.value
    # the line and the table name their precisions: "auto" is the detected device's own (fp32
    # on a CPU) and bf16 on the accelerators; the line says when the table's differs
    here = workbench.device().precision
    assert f"GiB per device in {here}" in p.summary.value and "needs (bf16)" in p.devices.value
    assert ("the table below: bf16" in p.summary.value) == (here != "bf16")
    p.precision.value = "fp32"  # one precision asked for: the table's and the line's, named once
    assert "needs (fp32)" in p.devices.value and "the table below" not in p.summary.value
    p.precision.value = "auto"
    p.task.value = "classification"
    assert p.value.task == "classification" and p.plan.model == "gpt2-small"
    p.batch_size.value, p.precision.value = 4, "fp32"
    assert (p.plan.batch_size, p.plan.precision) == (4, "fp32")
    assert repr(p).startswith("ModelPicker(gpt2-small, task=classification, batch 4 x 128")
    assert WIDGET_VIEW in p._repr_mimebundle_()


def test_a_model_that_does_not_fit_shows_the_cheapest_fix():
    p = pick_model("llama-70b", batch_size=8, seq_len=2048)
    assert p.value.name == "llama-70b" and p.fits is False
    assert "does not fit" in p.summary.value and "cheapest fix" in p.summary.value


def test_model_picker_shows_bad_input_as_a_message():
    p = pick_model("gpt2")
    p.size.value = HUB
    assert p.value is None and not p.source.disabled and "type a hub id" in p.error
    p.source.value = "nobody/no-such-model"  # HF_HUB_OFFLINE=1 in conftest
    assert p.value is None and "nobody/no-such-model" in p.summary.value
    p.source.value = "/no/such/model-dir"
    assert p.value is None and "does not exist" in p.error and "does not exist" in p.summary.value
    p.size.value = "tiny"
    assert p.source.disabled and p.value.name == "gpt2-tiny"
    p.seq_len.value = 4096
    assert p.value is None and "at most 512 tokens" in p.summary.value
    assert repr(p).startswith("ModelPicker(invalid:")
    p.seq_len.value = 256
    assert p.value.name == "gpt2-tiny" and p.plan.seq_len == 256


def test_the_model_picker_says_when_a_size_needs_the_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    p = pick_model("gpt2", size="small")
    assert ("small (hub: openai-community/gpt2)", "small") in p.size.options
    assert p.hub == "offline" and p.value.name == "gpt2-small"  # the spec stays: its code runs online
    assert "needs the hub (download)" in p.summary.value and "cannot load offline" in p.summary.value
    assert "HF_HUB_OFFLINE=1" in p.summary.value and repr(p).endswith("fits, cannot load offline)")
    p.size.value = "tiny"
    assert p.hub is None and "random init" in p.summary.value and "needs the hub" not in p.summary.value
    # online (no network is reached: a named size's config is in the catalog)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    p.size.value = "small"
    assert p.hub == "download" and "needs the hub (download)" in p.summary.value
    assert "cannot load offline" not in p.summary.value
    # already in the local hub cache: loads offline too
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "models--openai-community--gpt2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc123")
    for name in ("config.json", "model.safetensors"):
        (snapshot / name).write_text("{}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    p.size.value, p.size.value = "medium", "small"
    assert p.hub == "cached" and "in the local hub cache" in p.summary.value
    assert "cannot load offline" not in p.summary.value


def test_unet_length_is_the_image_side():
    p = pick_model("unet")
    assert p.seq_len.description == "image side" and p.seq_len.value == 32
    p.family.value = "bert"
    assert p.seq_len.description == "seq len" and p.seq_len.value == 128


def test_a_picker_carries_its_saved_view_beside_the_widget():
    """What a notebook reopened without the kernel shows (labextension/src/heal.ts): each
    control's label and value, the verdict; and the widget's model it stands for."""
    p = pick_model("gpt2", batch_size=8, seq_len=256)
    bundle = p._repr_mimebundle_()
    saved = bundle["text/html"]
    assert bundle[composite.SAVED_MIME] == {"model_id": p.widget.model_id}
    for label, value in (("family", "gpt2"), ("batch size", "8"), ("seq len", "256"), ("precision", "auto")):
        # a dropdown shows its label: the family's reads "gpt2 (...)"
        assert re.search(f">{label}</span><code>{value}[^<]*</code>", saved), (label, saved[:2000])
    assert p.summary.value in saved
    p.batch_size.value = 48
    assert ">batch size</span><code>48</code>" in p.saved_view()
    assert "Train" not in composite.saved_view(workbench.train_form(p).widget)  # no buttons


def test_dataset_picker_previews_and_measures_padding(topic):
    d = topic
    assert d.value.source == "docstrings-topic" and d.value.task == "classification"
    assert (d.text.value, d.label.value, d.target.value) == ("text", "label", "")
    assert "<table" in d.preview.value and "<th>label</th>" in d.preview.value
    assert any(topic in d.preview.value for topic in ("asyncio", "email", "http", "logging", "xml"))
    assert bytes(d.histogram.value).startswith(b"\x89PNG") and d.histogram.layout.display != "none"
    s = d.stats
    assert s["bucketed"]["waste_pct"] < s["longest"]["waste_pct"] < s["max_length"]["waste_pct"]
    assert s["max_length"]["shapes"] <= 2 and s["bucketed"]["shapes"] <= 8
    for key in ("max_length", "longest", "bucketed"):
        assert f"{s[key]['waste_pct']:.1f}%" in d.padding.value
    for k in (4, 8, 16):
        assert f"{s['buckets'][k]['waste_pct']:.1f}%" in d.padding.value
    assert s["buckets"][16]["waste_pct"] <= s["buckets"][4]["waste_pct"]
    assert WIDGET_VIEW in d._repr_mimebundle_() and repr(d).startswith("DataPicker(DataSpec(")


def test_batch_and_length_changes_recompute_only_the_statistics(topic, monkeypatch):
    d = topic
    monkeypatch.setattr(d.value, "load", lambda: pytest.fail("must reuse the cached lengths"))
    before = d.stats["max_length"]["waste_pct"]
    d.max_length.value = 512
    assert d.stats["max_length"]["waste_pct"] > before and "max length 512" in d.padding.value
    d.max_length.value, d.batch_size.value = 128, 16


def test_a_wrong_column_lists_the_columns_found(topic):
    d = topic
    d.text.value = "body"
    assert d.value is None and "columns found: text, label" in d.message.value
    assert d.preview.value == "" and d.stats == {}
    d.text.value = "text"
    assert d.value.columns == {"text": "text", "label": "label"} and d.stats


def test_dataset_picker_reads_a_local_csv(tmp_path):
    csv = tmp_path / "reviews.csv"
    rows = [f"{'good' if i % 2 else 'bad'} film number {i} " + "word " * (i % 7) for i in range(40)]
    csv.write_text("sentence,class\n" + "".join(f"{r},{'pos' if i % 2 else 'neg'}\n" for i, r in enumerate(rows)))
    d = pick_dataset()
    d.source.value = LOCAL
    assert d.value is None and not d.path.disabled and d.hub.disabled
    d.path.value = str(tmp_path / "missing.csv")
    assert d.value is None and "does not exist" in d.message.value
    d.path.value = str(csv)
    assert d.value.source == str(csv) and d.value.task == "classification"
    assert (d.text.value, d.label.value) == ("sentence", "class")
    assert "film number" in d.preview.value and len(d.lengths) == 36  # 10% held out
    d.task.value = "causal_lm"  # keeps the columns, changes the task
    assert d.value.task == "causal_lm" and d.text.value == "sentence"


def test_images_have_no_lengths():
    d = pick_dataset("digits")
    assert d.value.task == "diffusion" and d.lengths is None
    assert "no token lengths" in d.padding.value and d.histogram.layout.display == "none"


def test_form_links_its_settings_to_the_pickers(topic):
    m = pick_model("bert")
    form = train_form(m, topic)
    assert topic.widget not in form.widget.children  # shown in its own cell
    form.batch_size.value = 8
    assert m.batch_size.value == 8 and m.plan.batch_size == 8 and topic.batch_size.value == 8
    form.batch_size.value = 16
    form.until.value = "epochs"
    assert form.max_steps.disabled and not form.epochs.disabled
    assert form.call()[2] == {"epochs": 1.0, "batch_size": 16, "background": True}


def test_show_code_is_the_call_the_form_makes(monkeypatch):
    form = train_form(pick_model("gpt2"), pick_dataset("docstrings-lm", limit=64, max_length=64))
    form.max_steps.value, form.lr.value, form.device.value = 3, "2e-3", "cpu"
    form.code_button.click()
    code = form.code()
    assert "wb.train(" in form.code_view.value and "wb.model(&#x27;gpt2&#x27;)" in form.code_view.value
    compile(code, "<show code>", "exec")
    calls = []
    monkeypatch.setattr(workbench, "train", lambda *a, **kw: calls.append((a, kw)), raising=False)
    exec(code, {})
    (model, data), kwargs = calls[0]
    want_model, want_data, want_kwargs = form.call()
    assert model.to_dict() == want_model.to_dict() and data.to_dict() == want_data.to_dict()
    assert kwargs == want_kwargs == {"max_steps": 3, "batch_size": 16, "lr": 2e-3, "device": "cpu",
                                     "max_length": 64, "background": True}
    form.lr.value = "fast"
    assert "lr must be a number" in form.code_view.value and "wb.train(" not in form.code_view.value


def test_shown_code_follows_every_change_of_the_form_and_its_pickers():
    m, d = pick_model("gpt2"), pick_dataset("docstrings-lm", limit=64, max_length=64)
    form = train_form(m, d)
    form.max_steps.value = 5
    assert form.code_view.value == ""  # nothing shown until asked
    form.code_button.click()

    def shown():
        return html.unescape(form.code_view.value)

    assert "max_steps=5," in shown() and "wb.model('gpt2')" in shown()
    for control, value, text in (
        (form.max_steps, 7, "max_steps=7,"),
        (form.batch_size, 4, "batch_size=4,"),
        (form.precision, "fp32", "precision='fp32',"),
        (form.device, "cpu", "device='cpu',"),
        (form.lr, "3e-4", "lr=0.0003,"),
        (form.until, "epochs", "epochs=1.0,"),
        (form.epochs, 2.5, "epochs=2.5,"),
        (m.size, "small", "wb.model('gpt2', size='small')"),
        (m.task, "classification", "task='classification'"),
        (d.limit, 32, "limit=32"),
        (d.max_length, 96, "max_length=96,"),
    ):
        control.value = value
        assert text in shown(), (control.description, shown())
        assert shown() in f"<pre style='font:12px monospace;background:#f5f5f5;padding:6px'>{form.code()}</pre>"
    assert "max_steps" not in shown()
    m.size.value = HUB  # invalid until a hub id is typed: says so instead of keeping old code
    assert "pick a valid model first" in shown() and "wb.train(" not in shown()
    m.size.value = "tiny"
    assert "wb.model('gpt2', task='classification')" in shown()


def test_code_rebuilds_custom_specs(tmp_path):
    csv = tmp_path / "pairs.csv"
    csv.write_text("document,summary\n" + "".join(f"long text {i},short {i}\n" for i in range(20)))
    for spec, call in (
        (workbench.model("gpt2", size="small", task="classification", n_layer=3, lora=True),
         form_module._model_code),
        (workbench.dataset(str(csv), limit=10, seed=3), form_module._data_code),
        (workbench.dataset("docstrings-topic", task="causal_lm", eval_fraction=0.2), form_module._data_code),
    ):
        rebuilt = eval(call(spec), {"wb": workbench})
        assert rebuilt.to_dict() == spec.to_dict()


def test_train_button_starts_a_background_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    form = train_form(pick_model("gpt2"), pick_dataset("docstrings-lm", limit=64, max_length=64))
    form.max_steps.value, form.batch_size.value, form.device.value = 3, 4, "cpu"
    form.train_button.click()
    assert form.run is not None, form.message.value
    form.run.wait(120)
    assert form.run.status == "completed" and form.run.summary["step"] == 3
    assert form.run.path.resolve().parent == tmp_path.resolve() / "runs"
    assert "completed at step 3 of 3" in form.message.value and "run=" in repr(form)
    # its saved view (a notebook reopened without this kernel) holds the run's finished chart
    saved = form.saved_view()
    assert "class='wb-saved'" in saved and form.run.name in saved and "completed at step 3" in saved


@pytest.mark.slow
def test_a_stopped_form_run_says_where_and_how_to_continue(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    form = train_form(pick_model("gpt2"), pick_dataset("docstrings-lm", limit=64, max_length=32))
    form.max_steps.value, form.batch_size.value, form.device.value = 1000, 4, "cpu"
    form.train_button.click()
    stepped = threading.Event()
    form.run.subscribe(lambda event: stepped.set() if event.get("step", 0) >= 1 else None)
    assert stepped.wait(120), "no step within 120 s"
    form.run.stop()
    form.run.wait(120)
    step = form.run.summary["step"]
    assert form.run.status == "stopped" and 1 <= step < 1000
    assert f"stopped at step {step} (checkpoint kept: form.run.resume() continues)" in form.message.value


def test_a_run_that_fails_shows_its_reason_and_fix_in_the_form(tmp_path, monkeypatch):
    """A hub model offline: the run fails on its thread; the form says why and how to fix it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    form = train_form(pick_model("gpt2", size="small"), pick_dataset("docstrings-lm", limit=16, max_length=32))
    form.max_steps.value, form.batch_size.value, form.device.value = 2, 2, "cpu"
    form.train_button.click()
    assert form.run is not None, form.message.value
    with pytest.raises(RuntimeError, match="openai-community/gpt2"):
        form.run.wait(120)
    error = form.run.summary["error"]
    assert form.run.status == "failed" and "HF_HUB_OFFLINE=1" in error
    for fix in ("size='tiny'", "size=DIR", "unset HF_HUB_OFFLINE"):
        assert fix in error
    shown = html.unescape(form.message.value)
    assert f"{form.run.name} failed at step 0" in shown and error in shown
    assert "started" not in shown and composite.RED in form.message.value


def test_a_task_mismatch_is_a_message():
    form = train_form(pick_model("gpt2"), pick_dataset("docstrings-topic"))
    form.max_steps.value = 3
    form.train_button.click()
    assert form.run is None
    assert "causal_lm" in form.message.value and "classification" in form.message.value


def test_an_invalid_picker_is_a_message_in_the_form():
    m = pick_model("gpt2", size="/no/such/dir")
    assert m.value is None and m.size.value == HUB
    form = train_form(m, pick_dataset("docstrings-lm", limit=8))
    form.train_button.click()
    assert form.run is None and "pick a valid model first" in form.message.value


def test_the_form_alone_builds_and_shows_its_own_pickers():
    form = train_form()
    assert form.model_picker.widget in form.widget.children
    assert form.data_picker.widget in form.widget.children
    assert form.call()[0].name == "bert-tiny" and form.call()[1].source == "docstrings-topic"
    assert train_form().model_picker is not form.model_picker  # no shared state between cells


def _pickers_example() -> list[str]:
    """docs/pickers.md's example, one statement a cell, as its comment says to paste it."""
    import ast

    from conftest import ROOT

    text = (ROOT / "docs" / "pickers.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    return [ast.get_source_segment(code, node) for node in ast.parse(code).body]


def _widget_views_per_cell(cells: list[str], tmp_path) -> list[int]:
    """Run ``cells`` in a real kernel (nbclient); how many widget views each cell's output holds."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   timeout=600).execute()
    return [sum(WIDGET_VIEW in o.get("data", {}) for o in c.outputs) for c in nb.cells]


@pytest.mark.slow
def test_the_pickers_examples_cells_each_show_their_widget(tmp_path):
    """Pasted cell by cell, the docs' example shows the model picker, the dataset picker and
    the form, each once (once three empty cells: a picker showed only as a cell's last value)."""
    cells = _pickers_example()
    assert [c.split("=")[0].strip() for c in cells[1:4]] == ["model", "data", "form"], cells
    assert _widget_views_per_cell(cells, tmp_path) == [0, 1, 1, 1, 0]


@pytest.mark.slow
def test_a_shown_pickers_saved_view_follows_its_changes_at_each_cells_end(tmp_path):
    """The saved view a notebook keeps is the one the picker shows when the notebook is saved:
    changed by a later cell (as by a click), the picker's output is updated at that cell's end."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in
                ("import workbench as wb\nm = wb.pick_model('bert', batch_size=8)", "m.batch_size.value = 48")]
    NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   timeout=600).execute()
    (shown,) = nb.cells[0].outputs
    assert WIDGET_VIEW in shown.data and ">batch size</span><code>48</code>" in shown.data["text/html"]


@pytest.mark.slow
def test_a_picker_shows_once_as_a_cells_value_and_a_forms_own_pickers_inside_it(tmp_path):
    cells = ["import workbench as wb\nmodel = wb.pick_model()\nmodel",  # its value: shown once
             "data = wb.pick_dataset(limit=50)\ndisplay(data)",  # displayed: not again
             "form = wb.train_form()",  # its own pickers are in the form, not shown again
             "pickers = [wb.pick_model(), wb.pick_dataset(limit=50)]",  # two made, two shown
             "x = 1"]  # nothing left from an earlier cell
    assert _widget_views_per_cell(cells, tmp_path) == [1, 1, 1, 2, 0]
