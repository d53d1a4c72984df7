"""What is wrong with a dataset, found before anything trains: a local file read with the fix
for what fails (empty, header only, not in its encoding), a column's kind as a user reads it,
the blank rows of a column, and the refusals of labels or splits the training cannot take.
``data.DataSpec`` reads its files and checks its rows through these."""

from __future__ import annotations

import codecs
import math
from pathlib import Path
from typing import Any


def read_file(path: Path, fmt: str, encoding: str | None):
    """A local file as a Dataset; an empty, header-only or undecodable file named with the fix."""
    import datasets

    if path.stat().st_size == 0:
        raise ValueError(f"dataset file {str(path)!r} is empty (0 bytes): nothing to train on")
    extra: dict[str, Any] = {"encoding": encoding} if encoding and fmt != "parquet" else {}
    try:
        ds = datasets.load_dataset(fmt, data_files=str(path), split="train", **extra)
    except Exception as e:  # datasets buries the reason: look for it along the chain of causes
        chain: list[BaseException] = [e]
        while (cause := chain[-1].__cause__ or chain[-1].__context__) and len(chain) < 50:
            chain.append(cause)
        if any(isinstance(x, UnicodeDecodeError) or "Invalid UTF8" in str(x) for x in chain):
            raise ValueError(_not_decodable(path, encoding or "utf-8")) from e
        if "corresponds to no data" not in str(e):
            raise ValueError(
                f"could not read {str(path)!r} as {fmt}: {type(chain[-1]).__name__}: {chain[-1]}"
            ) from e
        ds = None
    if ds is None or ds.num_rows == 0:
        with path.open(encoding=encoding or "utf-8", errors="replace") as f:
            what = (
                f"column names ({', '.join(f.readline().strip().split(','))}) but "
                if fmt == "csv"
                else ""
            )
        raise ValueError(f"{str(path)!r} has {what}no rows: nothing to train on")
    return ds


def _not_decodable(path: Path, encoding: str) -> str:
    """Where ``path`` stops being ``encoding`` text (first 64 MiB), and the fix."""
    with open(path, "rb") as f:
        head = f.read(1 << 26)
    try:
        codecs.getincrementaldecoder(encoding)().decode(head)  # a cut-off last character waits
        where = ""
    except UnicodeDecodeError as e:
        where = f" (byte 0x{head[e.start]:02x} at offset {e.start})"
    name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
    return (
        f"{str(path)!r} is not {name} text{where}: pass the file's encoding, e.g. "
        f"wb.dataset({str(path)!r}, encoding='latin-1') ('cp1252' for files saved by Windows "
        "programs)"
    )


def is_text(feature) -> bool:
    import datasets

    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def column_kind(feature) -> str:
    """A column's type as a user reads it: ``int64 numbers``, ``JSON values``, ``images``."""
    import datasets

    if isinstance(feature, datasets.Value):
        numbers = feature.dtype.startswith(("int", "uint", "float"))
        return f"{feature.dtype} {'numbers' if numbers else 'values'}"
    if isinstance(feature, datasets.ClassLabel):
        return "class labels"
    return f"{type(feature).__name__} values"


def blank_rows(ds, column: str, is_label: bool):
    """Rows of ``column`` that are null or NaN (a label also: blank text, ClassLabel's -1), as
    numpy."""
    import datasets
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = ds.with_format("arrow")[column]
    blank = col.is_null(nan_is_null=True)
    if is_label and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        blank = pc.or_kleene(blank, pc.equal(pc.utf8_trim_whitespace(col), ""))  # pyright: ignore[reportAttributeAccessIssue]  # pyarrow.compute makes its functions at import
    elif is_label and isinstance(ds.features[column], datasets.ClassLabel):
        blank = pc.or_kleene(blank, pc.less(col, 0))  # pyright: ignore[reportAttributeAccessIssue]  # made at import
    return np.asarray(blank.fill_null(True), dtype=bool)


def value_counts(ds, column: str) -> dict:
    """Rows per value of ``column``."""
    return {
        c["values"]: c["counts"] for c in ds.with_format("arrow")[column].value_counts().to_pylist()
    }


def check_encoding(encoding: str, source: str, local_text: bool) -> None:
    """Refuse ``encoding=`` where it cannot apply, or a codec Python does not know."""
    if not local_text:
        raise ValueError(
            f"encoding= is for local text files (csv, json, jsonl, txt); {source!r} is not one"
        )
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(
            f"unknown encoding {encoding!r}; e.g. 'utf-8', 'latin-1', 'cp1252'"
        ) from None


def check_eval_labels(train_labels: set, eval_counts: dict, data_name: str) -> None:
    """Refuse eval labels the training split never has (the model could never predict them)."""
    only = [(v, n) for v, n in eval_counts.items() if v not in train_labels]
    if only:
        one = len(only) == 1
        what = ", ".join(f"{v!r} ({n} row{'s' if n > 1 else ''})" for v, n in only[:5])
        them = "it" if one else "them"
        raise ValueError(
            f"label{'' if one else 's'} {what} {'is' if one else 'are'} in the eval split of "
            f"{data_name!r} but never in train: the model cannot learn {them}. "
            f"Add training rows with {them}, or drop those eval rows"
        )


def check_classes(class_counts: dict, column: str, data_name: str, limit: int | None) -> None:
    """Refuse classification labels of one class: transformers makes a one-label model a
    regression head, which trains to accuracy 1.0 having learnt nothing."""
    if len(class_counts) != 1:  # none: check_split says there are too few rows
        return
    ((only, n),) = class_counts.items()
    rows = f"the {n} rows limit={limit} keeps" if limit else f"{n} row{'s' * (n != 1)}"
    raise ValueError(
        f"every row of {data_name!r} has the same label {only!r} in {column!r} ({rows}): "
        f"classification needs at least two classes (one class would train to accuracy 1.0, "
        f"learning nothing). Add rows of another class{', or a larger limit' if limit else ''}; "
        f"a number to predict (a score, a price) is regression, not a task the workbench trains"
    )


def check_split(rows: int, eval_fraction: float, data_name: str, class_counts: dict | None) -> None:
    """Refuse data that a train/eval split (stratified by class, given ``class_counts``) cannot
    split."""
    n_eval = math.ceil(eval_fraction * rows)  # as datasets' train_test_split counts
    if rows - n_eval < 1:
        raise ValueError(
            f"{data_name!r} has {rows} row{'s' if rows != 1 else ''}: too few to split into "
            f"train and eval (eval_fraction={eval_fraction}); use more rows"
        )
    if not class_counts:
        return
    single = [repr(c) for c, n in class_counts.items() if n < 2]
    if single:
        raise ValueError(
            f"class {', '.join(single[:5])} has 1 row in {data_name!r}: a stratified train/eval "
            f"split needs at least 2 rows of each class (one for each split). Add rows of that "
            f"class, drop it, or give a dataset with its own eval split"
        )
    classes, smaller = len(class_counts), min(n_eval, rows - n_eval)
    if smaller < classes:
        side, fix = (
            ("eval", f"eval_fraction={math.ceil(classes * 100 / rows) / 100:g} or more")
            if n_eval < classes
            else ("training", "a smaller eval_fraction")
        )
        raise ValueError(
            f"{data_name!r} has {classes} classes, but eval_fraction={eval_fraction} of its "
            f"{rows} rows gives {smaller} {side} rows, fewer than one per class: pass {fix}, "
            f"or use more rows"
        )
