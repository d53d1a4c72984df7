"""Datasets every machine can build offline: Python's own docstrings (PSF licence) and
scikit-learn's copy of the UCI optical digits (CC BY 4.0; also captioned, for text-to-image),
built deterministically for a Python version and cached as Arrow files under
``$WORKBENCH_CACHE``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from ..settings import cache_root

BUILD_VERSION = 1  # bump when a builder's output changes

# A fixed list of pure-Python standard-library modules and packages that exist on
# Python 3.10-3.13. Their source files are parsed (never imported); sub-packages included.
LM_MODULES = (
    "abc",
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "codecs",
    "collections",
    "concurrent",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "difflib",
    "dis",
    "doctest",
    "email",
    "enum",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "imaplib",
    "importlib",
    "inspect",
    "ipaddress",
    "json",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mimetypes",
    "multiprocessing",
    "numbers",
    "operator",
    "optparse",
    "pathlib",
    "pdb",
    "pickle",
    "pkgutil",
    "platform",
    "poplib",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "selectors",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "ssl",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "traceback",
    "types",
    "typing",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "wsgiref",
    "xml",
    "xmlrpc",
    "zipfile",
)
# Six packages with many docstrings each: the classes of `docstrings-topic`.
TOPIC_MODULES = ("asyncio", "email", "http", "importlib", "logging", "xml")
_SKIP = re.compile(r"(^|\.)(test|tests|__main__|windows_events|windows_utils)($|\.)")


def cache_dir() -> Path:
    """The workbench's cache (``settings.cache_root``: ``$WORKBENCH_CACHE`` or ~/.cache)."""
    return cache_root()


def _sources(package: str) -> list[Path]:
    """The .py files of a standard-library module or package, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if (root / package).is_dir():
        files = sorted((root / package).rglob("*.py"))
        return [
            f
            for f in files
            if not _SKIP.search(".".join(f.relative_to(root).with_suffix("").parts))
        ]
    single = root / f"{package}.py"
    return [single] if single.exists() else []


# What can hold a class or a function: statements, an except clause, a match case (an
# expression never holds a statement: a lambda's body is an expression)
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _docstrings_of(source: Path) -> Iterator[str]:
    # Parsed from the source with ast, never imported: importing would run module code and
    # see whatever other libraries patched in (nest_asyncio replaces asyncio functions,
    # for one), so the corpus would depend on what the process had imported before.
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return
    # ast.walk's breadth-first order, over the nodes that can hold a definition only (the
    # expressions are most of a tree's nodes: walking them took half of a build)
    todo: deque[ast.AST] = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, _HOLDERS))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield doc


def docstrings(packages: tuple[str, ...] = LM_MODULES, min_chars: int = 20) -> dict[str, list[str]]:
    """Deduplicated docstrings per top-level package, in a deterministic order."""
    seen: set[str] = set()
    out: dict[str, list[str]] = {}
    for package in sorted(packages):
        docs = []
        for source in _sources(package):
            for doc in _docstrings_of(source):
                doc = doc.strip()
                if len(doc) >= min_chars and doc not in seen:
                    seen.add(doc)
                    docs.append(doc)
        out[package] = docs
    return out


_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)", re.S)


def split_summary(doc: str) -> tuple[str, str] | None:
    """(body, first sentence) of a docstring, or None when it has no body."""
    m = _SENTENCE.match(doc)
    if not m:
        return None
    first = " ".join(m.group(1).split())
    body = doc[m.end() :].strip()
    if len(first) < 10 or len(body) < 40:
        return None
    return body, first


# --------------------------------------------------------------------------- builders
def _build_lm() -> dict[str, list]:
    docs = docstrings()
    return {"text": [d for package in sorted(docs) for d in docs[package]]}


def _build_topic() -> dict[str, list]:
    docs = docstrings(TOPIC_MODULES)
    n = min(len(docs[p]) for p in TOPIC_MODULES)  # balanced classes
    text, label = [], []
    for i in range(n):  # interleave so that any prefix stays balanced
        for p in TOPIC_MODULES:
            text.append(docs[p][i])
            label.append(p)
    return {"text": text, "label": label}


def _build_summary() -> dict[str, list]:
    pairs = [split_summary(d) for d in _build_lm()["text"]]
    pairs = [p for p in pairs if p]
    return {"document": [b for b, _ in pairs], "summary": [s for _, s in pairs]}


def _build_digits() -> dict[str, list]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError(
            "the 'digits' dataset needs scikit-learn: pip install 'gaudi-workbench[diffusion]'"
        ) from None
    import numpy as np

    d = load_digits()
    assert not isinstance(d, tuple)  # a Bunch: the (X, y) pair comes only with return_X_y
    # 8x8 images with values 0..16, upscaled 4x (nearest) to 32x32 uint8 images 0..255
    images = (d.images * (255.0 / 16.0)).round().astype(np.uint8)
    images = images.repeat(4, axis=1).repeat(4, axis=2)
    return {"image": [im.tolist() for im in images], "label": [int(x) for x in d.target]}


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def caption(digit: int) -> str:
    """The caption of a digit in ``digits-captioned``: ``"a handwritten seven"``."""
    return f"a handwritten {DIGIT_WORDS[digit]}"


def _build_digits_captioned() -> dict[str, list]:
    d = _build_digits()
    return {**d, "caption": [caption(x) for x in d["label"]]}


BUNDLED: dict[str, dict] = {
    "docstrings-lm": {
        "build": _build_lm,
        "task": "causal_lm",
        "columns": {"text": "text"},
        "about": "Python standard-library docstrings, for language modelling",
    },
    "docstrings-topic": {
        "build": _build_topic,
        "task": "classification",
        "columns": {"text": "text", "label": "label"},
        "about": f"which of {len(TOPIC_MODULES)} stdlib packages a docstring comes from (balanced)",
    },
    "docstrings-summary": {
        "build": _build_summary,
        "task": "seq2seq",
        "columns": {"text": "document", "target": "summary"},
        "about": "docstring body -> its first sentence",
    },
    "digits": {
        "build": _build_digits,
        "task": "diffusion",
        "columns": {"image": "image", "label": "label"},
        "about": "scikit-learn's 8x8 handwritten digits upscaled to 32x32 grey images",
    },
    "digits-captioned": {
        "build": _build_digits_captioned,
        "task": "text_to_image",
        "columns": {"image": "image", "caption": "caption"},
        "about": "the digits with captions naming them ('a handwritten seven'), for text-to-image",
    },
}


def _features(name: str):
    import datasets

    if name in ("digits", "digits-captioned"):
        return datasets.Features(
            {
                "image": datasets.Array2D((32, 32), "uint8"),
                "label": datasets.ClassLabel(names=[str(i) for i in range(10)]),
                **({"caption": datasets.Value("string")} if name == "digits-captioned" else {}),
            }
        )
    if name == "docstrings-topic":
        return datasets.Features(
            {
                "text": datasets.Value("string"),
                "label": datasets.ClassLabel(names=list(TOPIC_MODULES)),
            }
        )
    return None


def path(name: str) -> Path:
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / "datasets" / f"{name}-v{BUILD_VERSION}-{py}"


def load(name: str, build: Callable[[], dict] | None = None):
    """The bundled dataset ``name`` as a single ``datasets.Dataset``, built on first use."""
    import datasets

    target = path(name)
    if not (target / "dataset_info.json").exists():
        columns = (build or BUNDLED[name]["build"])()
        ds = datasets.Dataset.from_dict(columns, features=_features(name))
        target.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target and rename, so that two processes (torchrun workers)
        # building at once never see a half-written dataset.
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
        shown = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()  # a one-off local save: no bar in the notebook
        try:
            ds.save_to_disk(str(tmp))
        finally:
            if shown:
                datasets.enable_progress_bars()
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(target))
