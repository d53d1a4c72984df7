"""Datasets: bundled, local files, hub ids; splits, previews, lengths, preprocessing."""

from __future__ import annotations

import collections
import json

import pytest

import workbench as wb
from workbench.data import bundled
from workbench.data.dataset import DataSpec


@pytest.mark.parametrize("name", list(bundled.BUNDLED))
def test_every_bundled_dataset_loads_with_a_deterministic_split(name):
    dd = wb.dataset(name).load()
    assert set(dd) == {"train", "eval"} and dd["train"].num_rows > 500 and dd["eval"].num_rows > 50
    again = wb.dataset(name).load()
    assert dd["eval"][:3] == again["eval"][:3]


def test_docstrings_topic_is_balanced_over_six_packages():
    ds = bundled.load("docstrings-topic")
    counts = collections.Counter(ds["label"])
    assert len(counts) >= 6 and len(set(counts.values())) == 1
    spec = wb.dataset("docstrings-topic")
    assert spec.label_names == list(bundled.TOPIC_MODULES) and spec.num_labels == 6


@pytest.mark.slow
def test_bundled_builders_are_deterministic():
    assert bundled._build_topic() == bundled._build_topic()
    summary = bundled._build_summary()
    assert all(s and d for s, d in zip(summary["summary"], summary["document"]))
    assert not any(d.startswith(s) for s, d in zip(summary["summary"][:50], summary["document"][:50]))


def test_digits_are_32x32_images_scaled_to_minus_one_one():
    spec = wb.dataset("digits")
    pixels = spec.prepare()["train"].with_format("numpy")["pixel_values"][:8]
    assert pixels.shape == (8, 1, 32, 32)
    assert pixels.min() == -1.0 and pixels.max() == 1.0


def test_spec_round_trips_through_json():
    spec = wb.dataset("docstrings-summary", limit=100, seed=3)
    again = DataSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec and again.load()["train"].num_rows == 90


def test_preview_and_lengths():
    spec = wb.dataset("docstrings-topic")
    df = spec.preview(3)
    assert list(df.columns) == ["text", "label"] and len(df) == 3
    assert set(df["label"]) <= set(bundled.TOPIC_MODULES)
    _, tok = wb.model("bert").build(num_labels=6)
    stats = spec.lengths(tok)
    assert stats["count"] == spec.load()["train"].num_rows
    assert stats["min"] <= stats["p50"] <= stats["p90"] <= stats["max"]


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "json", "parquet"])
def test_local_files(tmp_path, suffix):
    import pandas as pd

    df = pd.DataFrame({"sentence": [f"row {i} is {'good' if i % 2 else 'bad'}" for i in range(40)],
                       "sentiment": ["pos" if i % 2 else "neg" for i in range(40)]})
    path = tmp_path / f"data.{suffix}"
    {"csv": lambda: df.to_csv(path, index=False),
     "jsonl": lambda: df.to_json(path, orient="records", lines=True),
     "json": lambda: df.to_json(path, orient="records", lines=True),
     "parquet": lambda: df.to_parquet(path)}[suffix]()
    spec = wb.dataset(str(path), text="sentence", label="sentiment")
    assert spec.task == "classification" and spec.kind == "local"
    dd = spec.load()
    assert dd["train"].num_rows == 36 and dd["train"].features["sentiment"].names == ["neg", "pos"]


def test_local_text_file_guesses_its_column(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"line number {i}" for i in range(30)))
    spec = wb.dataset(str(path))
    assert spec.task == "causal_lm" and spec.columns == {"text": "text"}
    assert spec.load()["train"].num_rows == 27


# ---------------------------------------------------------------- bad input, clear errors
def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match=f"dataset file '{missing}' does not exist"):
        wb.dataset(str(missing))


def test_wrong_column_lists_the_columns_found(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("utterance,mood\nhello,pos\nbye,neg\n")
    # refused at wb.dataset, before any run: the file's columns are read there
    with pytest.raises(ValueError, match=r"column 'txt' \(for text\) is not in 'd'; columns found: utterance, mood\. Pass text="):
        wb.dataset(str(path), text="txt", label="mood")
    with pytest.raises(ValueError, match=r"column 'moody' \(for label\) is not in 'd'; columns found: utterance, mood\. Did you mean label='mood'\?"):
        wb.dataset(str(path), text="utterance", label="moody")
    with pytest.raises(ValueError, match="columns found: utterance, mood. Pass text="):
        wb.dataset(str(path))


def test_a_label_alone_still_finds_the_text_column(tmp_path):
    """``label=`` alone: the file's ``text`` column is still found (it was left unused, and
    training then refused the file for having no text column)."""
    path = tmp_path / "d.csv"
    path.write_text("text,stars\n" + "".join(f"row {i},{i % 2}\n" for i in range(20)))
    spec = wb.dataset(str(path), label="stars")
    assert spec.columns == {"label": "stars", "text": "text"} and spec.task == "classification"
    assert len(spec.load()["train"]) > 0


def test_a_source_that_is_not_a_name_or_path_is_refused(tmp_path):
    """A list of rows was named by its str() and looked for on the hub (and an int retried
    the hub for 30 s)."""
    for source in (["a b", "c d"], 5):
        with pytest.raises(TypeError, match=r"^source must be a bundled name, a file path or a hub id, got type (list|int): write rows to a file"):
            wb.dataset(source)


def test_unknown_role_and_task():
    with pytest.raises(TypeError, match="unknown column role 'labels'; roles: text, label, target, image"):
        wb.dataset("docstrings-topic", labels="x")
    with pytest.raises(ValueError, match="unknown task 'regression'; known: classification"):
        wb.dataset("docstrings-topic", task="regression")


def test_hub_dataset_offline_says_so_and_how_to_use_a_local_file():
    with pytest.raises(RuntimeError, match=r"(?s)'someone/reviews'.*HF_HUB_OFFLINE.*local file or directory"):
        wb.dataset("someone/reviews", label="label").load()


def test_a_misspelt_bundled_dataset_suggests_the_bundled_name_not_a_download():
    with pytest.raises(ValueError, match=r"^unknown dataset 'docstrings-topics': did you mean the bundled "
                                         r"'docstrings-topic'\? Bundled: docstrings-lm, docstrings-topic"):
        wb.dataset("docstrings-topics")
    with pytest.raises(ValueError, match=r"did you mean the bundled 'digits'\?.*owner/name"):
        wb.dataset("digit", image="image")
    assert wb.dataset("someone/docstrings-topics").kind == "hub", "an owner's hub id is taken as written"


def test_blank_rows_are_said_once_per_call(tmp_path):
    """Every read of the data (the checks, the label count, the preprocessing, the trainer's
    own rebuild) warned again: four to five lines for one wb.train. Now one per call."""
    import warnings

    path = tmp_path / "gaps.csv"
    path.write_text("text,label\n" + "".join(f"{'' if i % 7 == 0 else f'row {i} here'},{'ab'[i % 2]}\n"
                                             for i in range(60)))
    spec = wb.dataset(str(path), text="text", label="label")

    def said(call) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every warning issued, even from the same line
            call()
        return [str(w.message) for w in caught if "rows of 'gaps'" in str(w.message)]

    one = ["dropped 9 of 60 rows of 'gaps' whose 'text' is blank or NaN; the other rows train "
           "(fill those in to keep them)"]
    run = None

    def train():
        nonlocal run
        run = wb.train("bert-tiny", spec, max_steps=2, batch_size=4, max_length=16, live=False,
                       run_dir=tmp_path / "runs")

    assert said(train) == one
    assert run.status == "completed", run.summary.get("error")
    assert said(spec.load) == one, "asked again, said again"
    assert said(lambda: spec.num_labels) == [], "the same spec, already read: nothing new to say"
    fresh = wb.dataset(str(path), text="text", label="label")
    assert said(lambda: fresh.preview(2)) == one
