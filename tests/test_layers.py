"""The architecture's checks that import-linter's contracts cannot state.

The layers themselves are import-linter contracts in pyproject.toml (``[tool.importlinter]``,
run by ``lint-imports`` in ``make lint``): the package's folders and top-level modules are
units in layers, each importing only lower ones, no cycle inside any folder, and nothing
imports the package's front door. Here, reading every ``import`` statement with ``ast`` (those
inside functions too): every unit is named in the layers contract, a subpackage's door imports
nothing, and no module imports another module's ``_private`` names.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"
pytestmark = pytest.mark.policy  # source files only: `make lint` runs these

WHOLE = {"server"}  # subpackages whose modules share private names (one unit each)
FACADE = {"__init__", "__main__"}  # the package's front door and its script
SUBPACKAGE_DOORS = "__init__"  # a subpackage's __init__ holds a docstring and imports nothing


def _module(path: Path) -> str:
    """``training.engine`` for workbench/training/engine.py, ``server`` for workbench/server/*."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if len(parts) > 1 and parts[0] in WHOLE:
        return parts[0]
    return ".".join(parts)


def _dotted(parts: list[str]) -> str:
    """The module an import of ``workbench.<parts>`` reaches (a name may follow)."""
    if not parts:
        return "__init__"
    if parts[0] in WHOLE:
        return parts[0]
    if len(parts) >= 2 and (PACKAGE / parts[0] / f"{parts[1]}.py").exists():
        return f"{parts[0]}.{parts[1]}"
    if (PACKAGE / parts[0]).is_dir():
        return f"{parts[0]}.__init__"
    return parts[0]


def _resolve(path: Path, node: ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) pairs for a ``from ... import`` inside workbench."""
    if node.level == 0:
        if not (node.module or "").startswith("workbench"):
            return []
        parts = node.module.split(".")[1:]
    else:
        package = list(path.relative_to(PACKAGE).parent.parts)
        base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        parts = base + (node.module.split(".") if node.module else [])
    out = []
    for alias in node.names:
        as_module = parts + [alias.name]  # `from .pkg import mod`: mod is a module
        is_module = (PACKAGE.joinpath(*as_module).with_suffix(".py").exists()
                     or PACKAGE.joinpath(*as_module).is_dir())
        if is_module:
            out.append((_dotted(as_module), None))
        else:
            out.append((_dotted(parts), alias.name))
    return out


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every workbench import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, mod, name) for mod, name in _resolve(path, node)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("workbench."):
                    found.append((node.lineno, _dotted(alias.name.split(".")[1:]), None))
    return found


def _doors() -> list[Path]:
    """The ``__init__.py`` of every subpackage but the whole one (server)."""
    return [p for p in PACKAGE.glob("*/__init__.py") if p.parent.name not in WHOLE]


def _contracts() -> list[dict]:
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def _layered_units() -> list[str]:
    """The units the layers contract names, highest layer first."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers" and c.get("containers") == ["workbench"]]
    return [name.strip() for layer in layers["layers"] for name in re.split(r"[|:]", layer)]


def _units() -> set[str]:
    """The package's folders and top-level modules (its front door excepted)."""
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    return modules | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_every_unit_is_in_the_layers_contract_once():
    """A new folder or top-level module goes into a layer of pyproject's contract (import-linter
    would say so too, as the contract is exhaustive; this says it without import-linter)."""
    named = _layered_units()
    assert len(named) == len(set(named)), f"named twice: {sorted({n for n in named if named.count(n) > 1})}"
    assert set(named) == _units(), (
        f"put into a layer of [tool.importlinter] in pyproject.toml: {sorted(_units() - set(named))}; "
        f"no longer in the package: {sorted(set(named) - _units())}")


def test_the_contracts_are_the_strict_kind():
    """The layers contract is exhaustive with independent units per layer, imports are never
    ignored, and the front door and the folders' insides have their contracts."""
    contracts = _contracts()
    assert not any(c.get("ignore_imports") for c in contracts), "an ignored import hides a cycle"
    layers = next(c for c in contracts if c["type"] == "layers")
    assert layers["exhaustive"] is True and not any(":" in layer for layer in layers["layers"])
    assert {"acyclic_siblings", "forbidden"} <= {c["type"] for c in contracts}


def test_a_subpackage_door_imports_nothing():
    """``training/__init__.py`` and its kind hold a docstring: importing ``workbench.training``
    pulls in nothing, and no layer can be reached through a package's door."""
    assert _doors(), "the package has subpackages"
    for door in _doors():
        assert not _imports(door), f"{door.relative_to(PACKAGE.parent)} imports workbench modules"


def test_no_module_imports_another_modules_private_names():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module(path)
        for line, mod, name in _imports(path):
            if mod == me or name is None:
                continue
            if mod == "__init__" and me not in FACADE:  # the front door serves users only
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name} from the package's __init__")
            elif name.startswith("_") and not name.startswith("__"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}.{name}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


@pytest.mark.parametrize("where, source, expected", [
    ("x.py", "from .training.engine import train\n", [("training.engine", "train")]),
    ("x.py", "def f():\n    from .rundir.run import _now\n", [("rundir.run", "_now")]),
    ("x.py", "from workbench.backends.registry import device\n", [("backends.registry", "device")]),
    ("training/x.py", "from . import recipe\n", [("training.recipe", None)]),
    ("training/x.py", "from .. import __version__\n", [("__init__", "__version__")]),
    ("server/x.py", "from ..training.recipe import x\n", [("training.recipe", "x")]),
    ("server/x.py", "from ..training import recipe\n", [("training.recipe", None)]),
    ("server/x.py", "from . import handlers\n", [("server", None)]),
    ("x.py", "import workbench.rundir.run\n", [("rundir.run", None)]),
])
def test_the_reader_sees_every_kind_of_import(tmp_path, where, source, expected, monkeypatch):
    """The checks above are only as good as the reader: each import form is found."""
    fake = tmp_path / "workbench"
    for sub in ("server", "training", "rundir", "backends"):
        (fake / sub).mkdir(parents=True)
    for name in ("training/engine", "rundir/run", "backends/registry", "training/recipe",
                 "server/handlers"):
        (fake / f"{name}.py").write_text("")
    (fake / where).write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert [(m, n) for _line, m, n in _imports(fake / where)] == expected


def _defined(module: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_every_module_and_function_the_architecture_doc_names_exists():
    """docs/architecture.md names modules (``training.engine``), their functions
    (``rundir.writer.RunWriter.claim``) and each subpackage's modules in its table: each
    one is there, so the page cannot drift from the tree."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    missing = []
    for ref in re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)+)`", doc):
        package, module, *rest = ref.split(".")
        if package not in subpackages:
            continue
        path = PACKAGE / package / f"{module}.py"
        if not path.exists():
            missing.append(ref)
        elif rest and rest[0] not in _defined(path):
            missing.append(ref)
    for row in re.findall(r"^\| `([a-z_]+)/` \|.*\| (.*) \|$", doc, flags=re.M):
        package, modules = row
        while re.search(r"\([^()]*\)", modules):  # what a module holds, in brackets, goes
            modules = re.sub(r"\([^()]*\)", "", modules)
        for name in re.findall(r"`([a-z_]+)`", modules):
            if package in subpackages and not (PACKAGE / package / f"{name}.py").exists():
                missing.append(f"{package}/{name}.py")
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"
    drawn = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name in subpackages}
    table = set(re.findall(r"^\| `([a-z_]+)/` \|", doc, flags=re.M))
    assert drawn <= table, f"subpackages the table lacks: {sorted(drawn - table)}"


# ---------------------------------------------------------------- the environment, one list
def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "string"`` assignments."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _environment_reads(path: Path) -> list[tuple[int, str]]:
    """(line, variable) of every environment lookup whose name the code states: a string,
    a module constant or ``settings.NAME`` (``os.environ.get/[...]/setdefault/pop``,
    ``os.getenv``, ``NAME in os.environ``)."""
    from workbench import settings

    tree = ast.parse(path.read_text())
    known = {**_constants(tree), **{k: v for k, v in vars(settings).items() if isinstance(v, str)}}

    def name(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return known.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "settings":
            return known.get(node.attr)
        return None

    def is_environ(node) -> bool:
        return ast.unparse(node) in ("os.environ", "environ")

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if is_environ(node.func.value) and node.func.attr in ("get", "setdefault", "pop"):
                key = node.args[0]
            elif ast.unparse(node.func) in ("os.getenv", "settings.get", "settings.is_set"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None and name(key) is not None:
            found.append((node.lineno, name(key)))
    return found


def test_every_environment_variable_the_package_reads_is_in_the_settings_table():
    """``workbench/settings.py`` is the one list of the variables the package reads: a
    lookup of a variable it does not list fails here, naming the file and line."""
    from workbench.settings import VARIABLES

    missing = [f"{p.relative_to(PACKAGE.parent)}:{line} reads {var}"
               for p in sorted(PACKAGE.rglob("*.py")) for line, var in _environment_reads(p)
               if var not in VARIABLES]
    assert not missing, "add these to workbench/settings.py VARIABLES:\n" + "\n".join(missing)
    reads = {var for p in PACKAGE.rglob("*.py") for _line, var in _environment_reads(p)}
    assert {"WORKBENCH_RUNS", "WORKBENCH_CACHE", "PT_HPU_LAZY_MODE", "RANK"} <= reads, reads


def test_the_environment_reader_sees_each_form_of_lookup(tmp_path):
    source = ("import os\nfrom workbench import settings\nVAR = 'FROM_CONSTANT'\n"
              "a = os.environ.get('A_GET')\nb = os.environ['B_ITEM']\nc = os.getenv('C_GETENV')\n"
              "d = 'D_IN' in os.environ\ne = os.environ.get(VAR)\nf = os.environ.get(settings.RUNS)\n"
              "g = os.environ.setdefault('G_DEFAULT', '1')\nh = settings.get('H_SETTINGS', '0')\n"
              "i = settings.is_set('I_SET')\n")
    path = tmp_path / "mod.py"
    path.write_text(source)
    expected = ["A_GET", "B_ITEM", "C_GETENV", "D_IN", "FROM_CONSTANT", "WORKBENCH_RUNS", "G_DEFAULT",
                "H_SETTINGS", "I_SET"]
    assert sorted(v for _line, v in _environment_reads(path)) == sorted(expected)
    assert [line for line, _var in _direct_lookups(path)] == [4, 5, 6, 7, 8, 9]


def _direct_lookups(path: Path) -> list[tuple[int, str]]:
    """(line, code) of every lookup of ``os.environ`` by name (``get``, ``[...]`` read, ``in``,
    ``os.getenv``); writes (``os.environ[X] = ...``, ``setdefault``, ``pop``) are not lookups."""
    def dotted(node) -> str | None:  # "os.environ" for os.environ; None for anything else
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute) and (base := dotted(node.value)) is not None:
            return f"{base}.{node.attr}"
        return None

    environ = ("os.environ", "environ")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if ((isinstance(node, ast.Call) and dotted(node.func) in ("os.environ.get", "environ.get", "os.getenv"))
                or (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                    and dotted(node.value) in environ)
                or (isinstance(node, ast.Compare) and any(dotted(c) in environ for c in node.comparators))):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_settings_looks_an_environment_variable_up():
    """One home: every module reads a variable through ``settings`` (``settings.get``,
    ``settings.is_set`` or a reader such as ``runs_root``), which refuses a name its table
    does not list. Writes stay where the package sets a variable for a library."""
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}: {code}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.name != "settings.py" or p.parent != PACKAGE
             for line, code in _direct_lookups(p)]
    assert not found, "read these through workbench.settings:\n" + "\n".join(found)


def test_where_runs_go_is_decided_in_one_function():
    """``settings.runs_root`` is the one reader of ``WORKBENCH_RUNS``: no other module looks
    it up (the listing, the planner, ``%wb`` and new runs all ask the function)."""
    readers = sorted({str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                      for _line, var in _environment_reads(p) if var == "WORKBENCH_RUNS"})
    assert readers == ["workbench/settings.py"], readers


# ---------------------------------------------------------------- the libraries' objects
# The names the package gives the libraries' objects (transformers' Trainer, its arguments,
# control and state, a model, its config, a tokenizer, accelerate's loaders and shards,
# torch): an attribute written on one of them, or on a module imported from outside the
# package, is a write into someone else's object.
LIBRARY_OBJECTS = {"trainer", "model", "args", "config", "cfg", "shard", "loader", "tok",
                   "tokenizer", "accelerator", "base", "unet", "pipe", "pipeline", "scheduler",
                   "optimizer", "control", "state"}
# Process-wide library settings change through calls, not assignments
PROCESS_WIDE_CALLS = re.compile(r"^torch\.(backends\.[\w.]+\.allow_\w+|set_\w+|use_deterministic_algorithms)$")

# Each write the package makes, with why it is allowed: the library documents it, the object
# is one the package built and nobody else holds yet, or the write is undone (a scope that
# restores what it found). A new write fails the test until it is added here with its reason.
DOCUMENTED_WRITES = {
    ("workbench/catalog/modelspec.py", "tok.pad_token"):
        "a tokenizer catalog just loaded, before anyone holds it (transformers' padding docs)",
    ("workbench/catalog/modelspec.py", "cfg.num_labels"): "a config catalog builds for a new model",
    ("workbench/catalog/modelspec.py", "setattr(cfg)"): "a config catalog builds: the spec's overrides",
    ("workbench/catalog/modelspec.py", "cfg.head_dim"):
        "a config catalog builds: the head width its constructor derived, carried to the overrides",
    ("workbench/catalog/modelspec.py", "model.config.pad_token_id"): "a model catalog just built",
    ("workbench/diffusion/pipeline.py", "tokenizer.model_max_length"):
        "a tokenizer the pipeline just loaded (CLIP's 77 positions)",
    ("workbench/training/attention.py", "config.use_cache"):
        "restored: without_cache returns the function that puts it back (the engine calls it)",
    ("workbench/training/attention.py", "setattr(config)"): "that restore",
    ("workbench/training/torchconfig.py", "setattr(config)"):
        "torch._dynamo.config, set for a run and restored by the function each setter returns",
    ("workbench/compat/optimum_habana.py", "trainer.gaudi_config"):
        "the Trainer the compat layer itself built (Optimum Habana's attribute)",
    ("workbench/compat/optimum_habana.py", "trainer._gaudi_optimizer"):
        "the GaudiTrainer the compat layer itself built: its own field, read by its "
        "create_optimizer override (the hook transformers documents for subclasses)",
    ("workbench/training/trainer.py", "model.loss_function"):
        "transformers' documented setter (PreTrainedModel.loss_function.setter), set to the "
        "loss its property falls back to for a model whose class names none",
    ("workbench/training/trainer.py", "config.problem_type"):
        "a classifier's config the run just built, before any forward: a documented config "
        "field (PretrainedConfig.problem_type), set to what its first forward would set",
    ("benchmarks/gaudicounts.py", "transformers.Trainer.__init__"):
        "the gaudi-counts bench's own child process: one counting callback on every "
        "contender's Trainer alike (wb.train takes none), put back in a finally",
    ("workbench/compat/optimum_habana.py", "args.bf16"):
        "Optimum Habana's documented rule: use_torch_autocast turns bf16 on in its arguments",
    ("workbench/training/uncaught.py", "sys.excepthook"):
        "Python documents assigning sys.excepthook to customise how an unhandled exception is "
        "reported; the attachment's chains to the one it replaced (an attached run's error)",
    ("workbench/training/uncaught.py", "threading.excepthook"):
        "Python documents overriding threading.excepthook; chained as sys.excepthook is",
}
def _root(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _library_writes(path: Path) -> set[tuple[str, str]]:
    """(file, what) for every write into a library object in ``path``: an assigned
    attribute (``trainer.get_train_dataloader = ...``, ``obj.__class__ = ...``), a
    ``setattr``, or a process-wide torch setter."""
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names
                         if not a.name.startswith("workbench")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("workbench"):
            imported |= {a.asname or a.name for a in node.names}
    foreign = LIBRARY_OBJECTS | imported
    where = str(path.relative_to(PACKAGE.parent))
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(t, ast.Attribute) and (t.attr == "__class__" or _root(t.value) in foreign):
                    if _root(t.value) == "control" and t.attr.startswith("should_"):
                        continue  # TrainerControl's flags: how a callback steers the Trainer (documented)
                    found.add((where, ast.unparse(t)))
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in ("setattr", "delattr") and node.args and _root(node.args[0]) in foreign:
                found.add((where, f"{func}({ast.unparse(node.args[0])})"))
            elif PROCESS_WIDE_CALLS.match(func) and not where.endswith("torchconfig.py"):
                found.add((where, f"{func}()"))
    return found


def test_no_write_into_a_library_object_outside_a_documented_or_restored_scope():
    """The workbench composes the libraries: no method assigned on a Trainer instance, no
    class swapped under an object, no field of accelerate's objects overwritten, no torch
    setting changed for the process and left so. Every write there is, is listed above with
    its reason; a new one fails here until it is given one."""
    # the benchmarks too (the repository's developer package beside it, benchmarks/)
    scanned = sorted(PACKAGE.rglob("*.py")) + sorted((PACKAGE.parent / "benchmarks").glob("*.py"))
    found = set().union(*(_library_writes(p) for p in scanned))
    unexplained = sorted(found - set(DOCUMENTED_WRITES))
    assert not unexplained, ("writes into library objects with no documented, restored "
                             "scope (use a documented extension point, or undo it):\n"
                             + "\n".join(f"{f}: {w}" for f, w in unexplained))
    gone = sorted(set(DOCUMENTED_WRITES) - found)
    assert not gone, f"listed writes the package no longer makes (remove them): {gone}"


@pytest.mark.parametrize("source, expected", [
    ("def f(trainer):\n    trainer.get_train_dataloader = lambda: None\n",
     "trainer.get_train_dataloader"),
    ("def f(obj, cls):\n    obj.__class__ = cls\n", "obj.__class__"),
    ("def f(loader):\n    shard = loader.batch_sampler\n    shard.num_processes, shard.process_index = 1, 0\n",
     "shard.num_processes"),
    ("import torch\ndef f():\n    setattr(torch._dynamo.config, 'recompile_limit', 64)\n",
     "setattr(torch._dynamo.config)"),
    ("import torch\ntorch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)\n",
     "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp()"),
])
def test_the_write_finder_sees_each_kind_of_patch(tmp_path, monkeypatch, source, expected):
    """The patches the engine once made are each found (the checker is only as good as this)."""
    fake = tmp_path / "workbench"
    fake.mkdir()
    (fake / "mod.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert expected in {what for _where, what in _library_writes(fake / "mod.py")}
