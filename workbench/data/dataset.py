"""Datasets: bundled, local files or hub ids, described by a serialisable ``DataSpec``
(``load()``: a deterministic ``train``/``eval`` split; ``prepare(tokenizer)``: cached ``map``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import numbers
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.modelspec import (  # hub_error: the hub module's, through the catalog
    hub_error,
    is_local,
)
from ..diffusion import images
from ..liblogs import quiet_libraries, transformers_errors_only
from ..runargs import FIELDS, default
from ..shapes.buckets import LengthStats
from . import bundled
from .checks import (
    blank_rows,
    check_classes,
    check_encoding,
    check_eval_labels,
    check_split,
    column_kind,
    is_text,
    read_file,
    value_counts,
)

TASKS = ("classification", "causal_lm", "seq2seq", "diffusion", "text_to_image")
ROLES = ("text", "label", "target", "image", "caption")
LOCAL_FORMATS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".txt": "text",
}
# roles each task needs, and the column names tried when the user names none
NEEDS = {
    "classification": ("text", "label"),
    "causal_lm": ("text",),
    "seq2seq": ("text", "target"),
    "diffusion": ("image",),
    "text_to_image": ("image", "caption"),
}
DEFAULT_COLUMNS = {
    "text": ("text", "sentence", "content", "document", "source"),
    "label": ("label", "labels", "class"),
    "target": ("target", "summary", "labels_text"),
    "image": ("image", "img", "pixels"),
    "caption": ("caption", "prompt"),
}
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


class BlankRows(UserWarning):
    """Rows left out of a dataset because their text, label or target is blank."""


def _stamp(source: str) -> tuple[int, int] | None:
    """A local file's (mtime, size): a spec reads its file again when it changed."""
    try:
        st = Path(source).expanduser().stat()
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class DataSpec:
    """A serialisable description of a dataset and how to split it.

    Attributes
    ----------
    source : str
        A bundled name (``wb.datasets()``), a local file (csv, json, jsonl, parquet, txt),
        a directory saved by ``datasets``, or a hub id.
    task : str
        ``classification``, ``causal_lm``, ``seq2seq``, ``diffusion`` or ``text_to_image``.
    columns : dict
        Role -> column name, roles ``text``, ``label``, ``target``, ``image``, ``caption``.
    eval_fraction, seed, limit
        Held-out share, split seed, and an optional cap on rows (for smoke runs).
    config : str or None
        Hub dataset configuration name.
    encoding : str or None
        Text encoding of a local csv/json/jsonl/txt file (default UTF-8).
    crop, flip : str, bool
        Captioned images: ``center`` or ``random`` square crops; random horizontal flips.
    """

    source: str
    task: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    eval_fraction: float = 0.1
    seed: int = 0
    limit: int | None = None
    config: str | None = None
    encoding: str | None = None
    crop: str = "center"
    flip: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataSpec:
        return cls(**d)

    @property
    def kind(self) -> str:
        if self.source in bundled.BUNDLED:
            return "bundled"
        if Path(self.source).suffix.lower() in LOCAL_FORMATS or is_local(self.source):
            return "local"
        return "hub"

    @property
    def name(self) -> str:
        return Path(self.source).stem if self.kind == "local" else self.source.split("/")[-1]

    # ----------------------------------------------------------------- loading
    def _raw(self):
        import datasets

        kind = self.kind
        if kind == "bundled":
            return bundled.load(self.source)
        if kind == "local":
            path = Path(self.source).expanduser()
            if not path.exists():
                raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
            if path.is_dir():
                if images.is_folder(path):  # image files + metadata.jsonl/.csv with their captions
                    return images.read_folder(path)
                if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
                    return datasets.load_from_disk(str(path))
                raise ValueError(
                    f"{str(path)!r} is a directory but not one saved by datasets' save_to_disk nor "
                    f"an image folder with {images.METADATA[0]}; pass one of its files "
                    f"({', '.join(LOCAL_FORMATS)})"
                )
            fmt = LOCAL_FORMATS.get(path.suffix.lower())
            if fmt is None:
                raise ValueError(
                    f"cannot read {path.suffix!r} files; use one of: {', '.join(LOCAL_FORMATS)}"
                )
            return read_file(path, fmt, self.encoding)
        if not _HUB_ID.match(self.source):
            raise ValueError(
                f"{self.source!r} is neither a bundled dataset "
                f"({', '.join(bundled.BUNDLED)}), an existing file, nor a hub id"
            )
        try:
            return datasets.load_dataset(self.source, self.config)
        except Exception as e:  # offline, missing, gated: one clear message
            raise hub_error("dataset", self.source, e) from e

    def load(self, *, warn: bool | None = True):
        """A ``DatasetDict`` with ``train`` and ``eval`` splits (deterministic), read once per
        spec. Rows dropped as blank are said (``BlankRows``) with ``warn=True``; ``None``: only
        when read now; ``False``: never (a run rebuilt from its spec)."""
        key = json.dumps([self.to_dict(), _stamp(self.source)], sort_keys=True, default=str)
        cached = self.__dict__.get("_loaded")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_loaded"] = (key, *self._split())
            warn = warn is not False
        _, dd, blank = cached
        if warn and blank:
            warnings.warn(blank, BlankRows, stacklevel=2)
        return dd

    def _split(self):
        """(the splits, the rows dropped as blank as a sentence or None)."""
        import datasets

        raw = self._raw()
        eval_split = None
        if isinstance(raw, datasets.DatasetDict):
            train_key = "train" if "train" in raw else next(iter(raw))
            for key in ("validation", "eval", "test"):
                if key in raw and key != train_key:
                    eval_split = raw[key]
                    break
            raw = raw[train_key]
        self._check_columns(raw)
        for split in (raw, eval_split):
            if split is not None:
                self._check_kinds(split)
        (raw, eval_split), dropped = self._drop_blank(raw, eval_split)
        # unlabelled: split train
        eval_split = eval_split if eval_split is None or len(eval_split) else None
        if self.limit:
            raw = raw.shuffle(seed=self.seed).select(range(min(self.limit, len(raw))))
        label = self.columns.get("label")
        classes = None  # rows per class name in train
        if self.task == "classification" and label:
            if not isinstance(raw.features[label], datasets.ClassLabel):
                if eval_split is not None:
                    check_eval_labels(
                        set(value_counts(raw, label)), value_counts(eval_split, label), self.name
                    )
                raw = raw.class_encode_column(label)
                if eval_split is not None:
                    eval_split = eval_split.cast_column(label, raw.features[label])
            names = raw.features[label].names
            classes = {names[i]: n for i, n in value_counts(raw, label).items()}
            check_classes(classes, label, self.name, self.limit)
        if eval_split is None:
            stratify = label if classes is not None else None
            check_split(len(raw), self.eval_fraction, self.name, classes)
            parts = raw.train_test_split(
                test_size=self.eval_fraction, seed=self.seed, stratify_by_column=stratify
            )
            raw, eval_split = parts["train"], parts["test"]
        elif self.limit:
            eval_split = eval_split.select(
                range(min(max(1, int(self.limit * self.eval_fraction)), len(eval_split)))
            )
        return datasets.DatasetDict({"train": raw, "eval": eval_split}), dropped

    def _check_columns(self, ds) -> None:
        found = list(ds.column_names)
        for role, col in self.columns.items():
            if col not in found:
                raise _no_column(role, col, self.name, found)
        missing = [r for r in NEEDS[self.task] if r not in self.columns]
        if missing:
            raise ValueError(
                f"task {self.task!r} needs a {missing[0]!r} column; columns found: "
                f"{', '.join(found)}. Pass {missing[0]}='<column name>'"
            )

    def _check_kinds(self, ds) -> None:
        """Refuse a text or target column that is not text, and classification labels that are
        not classes (mixed types, continuous numbers), naming the column and the fix."""
        import datasets

        for role in ("text", "target"):
            col = self.columns.get(role)
            # a column blank in every row is typed as numbers by the CSV reader: _drop_blank
            # names it as blank
            if (
                col
                and (feature := ds.features.get(col)) is not None
                and not is_text(feature)
                and not blank_rows(ds, col, False).all()
            ):
                used = set(self.columns.values())
                texts = [c for c, f in ds.features.items() if is_text(f) and c not in used]
                raise ValueError(
                    f"column {col!r} (for {role}) of {self.name!r} holds "
                    f"{column_kind(feature)}, not text, and the tokenizer reads text: pass "
                    f"{role}='<a text column>' "
                    f"(text columns: {', '.join(texts) or 'none'}), or write the column as text"
                )
        col = self.columns.get("label")
        if self.task != "classification" or col is None:
            return
        feature = ds.features[col]
        if isinstance(feature, datasets.ClassLabel) or is_text(feature):
            return
        if not isinstance(feature, datasets.Value):
            raise ValueError(
                f"label column {col!r} of {self.name!r} mixes value types ({column_kind(feature)}: "
                f"e.g. numbers in some rows, text in others): make every label the same type, "
                f"all text or all whole numbers"
            )
        if feature.dtype.startswith("float"):
            import pyarrow.compute as pc

            values = ds.with_format("arrow")[col].drop_null()
            fractional = values.filter(pc.not_equal(values, pc.floor(values)))  # pyright: ignore[reportAttributeAccessIssue]  # pyarrow.compute makes its functions at import
            if len(fractional):
                shown = ", ".join(f"{v:g}" for v in fractional[:3].to_pylist())
                raise ValueError(
                    f"the labels in {col!r} of {self.name!r} are continuous ({shown}, ...), not "
                    f"classes: classification needs a few classes. Bin them into classes "
                    f"(e.g. pandas.cut), or use a regression model (not a task the workbench "
                    f"trains); whole numbers (0, 1, 2) are classes"
                )
        elif not (feature.dtype.startswith(("int", "uint")) or feature.dtype == "bool"):
            raise ValueError(
                f"label column {col!r} of {self.name!r} holds {column_kind(feature)}, not classes: "
                f"give text or whole-number labels"
            )

    def _drop_blank(self, *splits):
        """(the splits without rows whose text, label or target is blank, what was dropped
        as a sentence or None)."""
        import numpy as np

        cols = {r: self.columns[r] for r in ("text", "label", "target") if r in self.columns}
        masks = [
            {c: blank_rows(ds, c, r == "label") for r, c in cols.items()} if ds is not None else {}
            for ds in splits
        ]
        drops = [np.any(list(m.values()), axis=0) if m else None for m in masks]
        dropped = sum(int(d.sum()) for d in drops if d is not None)
        if not dropped:
            return splits, None
        which = " or ".join(repr(c) for c in cols.values() if any(m and m[c].any() for m in masks))
        if drops[0] is not None and drops[0].all():
            raise ValueError(
                f"every row of {self.name!r} has a blank {which}: nothing to train on; "
                f"fill the column in, or map another one ({next(iter(cols))}='<column>')"
            )
        total = sum(len(ds) for ds in splits if ds is not None)
        kept = tuple(
            ds if d is None else ds.select(np.flatnonzero(~d)) for ds, d in zip(splits, drops)
        )
        return kept, (
            f"dropped {dropped} of {total} rows of {self.name!r} whose {which} is blank or "
            f"NaN; the other rows train (fill those in to keep them)"
        )

    @property
    def label_names(self) -> list[str] | None:
        if self.task != "classification":
            return None
        return list(self.load(warn=None)["train"].features[self.columns["label"]].names)

    @property
    def num_labels(self) -> int | None:
        names = self.label_names
        return len(names) if names else None

    def preview(self, n: int = 5):
        """The first ``n`` training rows as a pandas DataFrame (long text shortened)."""
        import numpy as np
        import pandas as pd

        train = self.load(warn=None)["train"]
        ds = train.select(range(min(n, train.num_rows)))
        image, label = self.columns.get("image"), self.columns.get("label")

        def cell(key, value):
            if key == image:
                return f"{'x'.join(map(str, np.asarray(value).shape))} image"
            if isinstance(value, str):
                return (value[:97] + "..." if len(value) > 100 else value).replace("\n", " ")
            return value

        df = pd.DataFrame([{k: cell(k, v) for k, v in row.items()} for row in ds])  # pyright: ignore[reportAttributeAccessIssue]  # datasets' __iter__ is unannotated: rows are dicts
        if label in df and self.task == "classification":
            df[label] = [ds.features[label].names[i] for i in df[label]]
        return df

    def lengths(self, tokenizer, split: str = "train") -> LengthStats:
        """Token-length statistics of the text column under ``tokenizer``."""
        import numpy as np

        text = self.columns.get("text")
        if text is None:
            raise ValueError(f"{self.name!r} has no text column (task {self.task})")
        ds = self.load(warn=None)[split]
        with transformers_errors_only():  # "longer than the maximum" is what we measure here
            ids = tokenizer(list(ds[text]), truncation=False)["input_ids"]
        return LengthStats(np.array([len(x) for x in ids]))

    # ----------------------------------------------------------------- preprocessing
    def prepare(self, tokenizer=None, max_length: int | None = None, target_max_length: int = 64):
        """Task preprocessing through a batched, cached ``map``.

        classification -> input_ids, attention_mask, labels; causal_lm -> input_ids,
        attention_mask; seq2seq -> input_ids, attention_mask, labels; diffusion ->
        pixel_values in [-1, 1] with shape (channels, height, width); text_to_image (``tokenizer``:
        the model's ``Captions``) -> RGB pixel_values at its resolution, input_ids of fixed length.
        ``max_length`` defaults to a run's (``RunArgs``).
        """
        max_length = default("max_length") if max_length is None else max_length
        dd = self.load(warn=None)
        c = self.columns
        if self.task == "diffusion":
            fn, fp = images.pixels(c["image"]), _fingerprint(self.to_dict(), "pixels")
        # `tokenizer`: the model's Captions (tokenizers, resolution)
        elif self.task == "text_to_image":
            fn = images.captioned(c, tokenizer, self.crop)
            fp = _fingerprint(self.to_dict(), images.signature(tokenizer))
        else:
            if tokenizer is None:
                raise ValueError(f"task {self.task!r} needs a tokenizer: spec.prepare(tokenizer)")
            fn = _tokenize(tokenizer, self.task, c, max_length, target_max_length)
            tok_id = [
                getattr(tokenizer, "name_or_path", ""),
                len(tokenizer),
                type(tokenizer).__name__,
            ]
            fp = _fingerprint(self.to_dict(), tok_id, max_length, target_max_length)
        out = {}
        for split, ds in dd.items():
            out[split] = ds.map(
                fn,
                batched=True,
                remove_columns=ds.column_names,
                new_fingerprint=f"{fp}-{split}-{ds._fingerprint}",
                desc=f"preparing {self.name} ({split})",
            )
        import datasets

        return datasets.DatasetDict(out)

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}={v!r}" for k, v in self.columns.items())
        return f"DataSpec({self.source!r}, task={self.task}, {cols})"


def _tokenize(
    tokenizer, task: str, c: dict[str, str], max_length: int | None, target_max_length: int
):
    def fn(batch):
        enc = tokenizer(batch[c["text"]], truncation=True, max_length=max_length)
        if task == "classification":
            enc["labels"] = batch[c["label"]]
        elif task == "seq2seq":
            enc["labels"] = tokenizer(
                text_target=batch[c["target"]], truncation=True, max_length=target_max_length
            )["input_ids"]
        return dict(enc)

    return fn


def infer_task(columns: dict[str, str], task: str | None) -> str:
    """``task`` if given, else the task the mapped columns imply."""
    implied = (
        t
        for role, t in (
            ("caption", "text_to_image"),
            ("image", "diffusion"),
            ("target", "seq2seq"),
            ("label", "classification"),
        )
        if role in columns
    )
    return task or next(implied, "causal_lm")


def dataset(
    source: str | DataSpec,
    *,
    task: str | None = None,
    eval_fraction: float = 0.1,
    seed: int = 0,
    limit: int | None = None,
    config: str | None = None,
    encoding: str | None = None,
    crop: str = "center",
    flip: bool = False,
    **columns: str,
) -> DataSpec:
    """Describe a dataset: bundled name, local file, saved directory or hub id.

    Parameters
    ----------
    source : str
        ``docstrings-lm``, ``docstrings-topic``, ``docstrings-summary``, ``digits``; a path
        to a csv/json/jsonl/parquet/txt file; or a hub id.
    task : str, optional
        Inferred from the columns when omitted (label -> classification, target ->
        seq2seq, image -> diffusion, else causal_lm).
    encoding : str, optional
        Text encoding of a local csv/json/jsonl/txt file (default UTF-8), e.g. ``"latin-1"``.
    crop, flip : str, bool
        Captioned images: ``"center"`` or ``"random"`` square crops; random horizontal flips.
    **columns : str
        Column names by role: ``text=``, ``label=``, ``target=``, ``image=``, ``caption=``.

    Examples
    --------
    >>> import workbench as wb
    >>> wb.dataset("docstrings-topic").task
    'classification'
    """
    if isinstance(source, DataSpec):
        return source
    bad = [r for r in columns if r not in ROLES]
    if bad:
        raise TypeError(f"unknown column role {bad[0]!r}; roles: {', '.join(ROLES)}")
    if task is not None and task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must be between 0 and 1, got {eval_fraction}")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1
    ):
        raise ValueError(
            f"limit must be a whole number of rows, at least 1, got {limit!r}: pass e.g. "
            f"limit=200 (a smoke run), or leave it out (limit=None) for all rows"
        )
    images.check_options(crop, flip)
    FIELDS["seed"].check("seed", seed)  # wb.train's seed check (a str failed in numpy's shuffle)
    if not isinstance(source, str | os.PathLike):  # str() of a list or a frame is no name
        raise TypeError(
            f"source must be a bundled name, a file path or a hub id, got type "
            f"{type(source).__name__}: write rows to a file (e.g. pandas.DataFrame(rows)"
            f".to_csv('data.csv', index=False)) and pass its path"
        )
    source = str(source)
    if encoding is not None:
        check_encoding(
            encoding,
            source,
            DataSpec(source).kind == "local"  # text files only
            and Path(source).suffix.lower() in (".csv", ".json", ".jsonl", ".txt"),
        )
    if source in bundled.BUNDLED:
        info = bundled.BUNDLED[source]
        cols = {**info["columns"], **columns}
        task = task or info["task"]
    else:
        cols = dict(columns)
        spec = DataSpec(source=source, encoding=encoding)
        _check_not_misspelt(spec)
        if spec.kind == "local" and not Path(source).expanduser().exists():
            raise FileNotFoundError(f"dataset file {source!r} does not exist")
        if spec.kind == "local":
            cols = _local_columns(spec, cols)
        task = infer_task(cols, task)
    return DataSpec(
        source=source,
        task=task,
        columns=cols,
        eval_fraction=eval_fraction,
        seed=seed,
        limit=limit,
        config=config,
        encoding=encoding,
        crop=crop,
        flip=flip,
    )


def _check_not_misspelt(spec: DataSpec) -> None:
    """Refuse a hub id without an owner that is one slip from a bundled name: it is that name
    misspelt, not a dataset to download."""
    close = difflib.get_close_matches(spec.source, bundled.BUNDLED, 1, cutoff=0.8)
    if spec.kind == "hub" and "/" not in spec.source and close:
        raise ValueError(
            f"unknown dataset {spec.source!r}: did you mean the bundled {close[0]!r}? Bundled: "
            f"{', '.join(bundled.BUNDLED)} (wb.datasets()). A hub dataset is named owner/name "
            f"(e.g. 'stanfordnlp/imdb')"
        )


def _no_column(role: str, column: str, name: str, found: list[str]) -> ValueError:
    """The error for a ``role=column`` the data ``name`` lacks, with the nearest it has."""
    near = difflib.get_close_matches(str(column), found, 1)
    fix = f"Did you mean {role}={near[0]!r}?" if near else f"Pass {role}='<one of those>'"
    return ValueError(
        f"column {column!r} (for {role}) is not in {name!r}; columns found: "
        f"{', '.join(found)}. {fix}"
    )


def _local_columns(spec: DataSpec, given: dict[str, str]) -> dict[str, str]:
    """A local file's columns by role: each one ``given`` checked against the file's (a name
    it lacks is refused, with the nearest), the rest guessed by their usual names; with only
    a label or a target given, the text is still guessed (``label="label"`` alone left a
    file's ``text`` column unused and training refused the file for having none)."""
    with quiet_libraries():  # datasets' progress bar while it reads the file: not the user's
        found = spec._raw().column_names
    if isinstance(found, dict):  # a saved DatasetDict: its splits' columns, the train split's
        found = found.get("train") or next(iter(found.values()))
    for role, name in given.items():
        if name not in found:
            raise _no_column(role, name, spec.name, found)
    if not given:
        return _guess_columns(spec, found)
    cols = dict(given)
    if cols.keys() <= {"label", "target"}:
        text = next((n for n in DEFAULT_COLUMNS["text"] if n in found), None)
        if text is not None and text not in cols.values():
            cols["text"] = text
    return cols


def _guess_columns(spec: DataSpec, found: list[str]) -> dict[str, str]:
    """Map roles to a local file's columns by their usual names."""
    cols = {}
    for role, names in DEFAULT_COLUMNS.items():
        for name in names:
            if name in found and name not in cols.values():
                cols[role] = name
                break
    # an image's text is its caption
    if "image" in cols and "text" in cols and "caption" not in cols:
        cols["caption"] = cols.pop("text")
    if not cols:
        raise ValueError(
            f"cannot tell which column holds the text in {spec.source!r}; columns found: "
            f"{', '.join(found)}. Pass text='<column>' (and label=/target= as needed)"
        )
    return cols


def datasets():
    """The bundled datasets as a table (pandas DataFrame)."""
    import pandas as pd

    rows = [
        {
            "name": name,
            "task": info["task"],
            "columns": ", ".join(f"{k}={v}" for k, v in info["columns"].items()),
            "about": info["about"],
        }
        for name, info in bundled.BUNDLED.items()
    ]
    return pd.DataFrame(rows)
