"""The architecture, checked: imports inside ``workbench/`` run one way, down the layers.

Every ``import`` statement of every module is read with ``ast`` (those inside functions
too: an import deferred into a function still couples the modules). A module may import
from its own layer or lower ones, never from a higher one; the whole graph has no cycle;
and no module imports another module's ``_private`` names.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"

# The layers, lowest first. A new module goes into one of them (the test says so).
LAYERS = [
    {"device", "chips", "_hpu", "bundled", "progress", "nbrecord", "interrupts", "families", "lock",
     "references", "hub", "pipeline", "monitor"},
    {"catalog", "data", "shapes", "batching", "memory", "footprint", "recipe", "diffusion",
     "attention", "checkpoint", "launchfiles", "flops", "images", "texttoimage", "latentcache"},
    {"run", "runspec", "dashboard", "writer", "chart", "page", "planner", "trainingplan"},
    {"callbacks", "trainer"},
    {"engine"},
    {"launcher", "worker", "profiler", "widgets", "pickers", "form", "composite", "magics", "cli",
     "checkup", "diagnosis", "server"},
    {"bench"},
]
FACADE = {"__init__", "__main__"}  # the package's front door: may import anything, lazily


def _module(path: Path) -> str:
    """``engine`` for workbench/engine.py, ``bench`` for anything under workbench/bench/."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 else rel.name


def _layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if module in names:
            return i
    return None


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
    if parts:
        return [(parts[0], alias.name) for alias in node.names]
    out = []  # `from . import x`: x is a module, or a name defined in the package's __init__
    for alias in node.names:
        is_module = (PACKAGE / f"{alias.name}.py").exists() or (PACKAGE / alias.name).is_dir()
        out.append((alias.name, None) if is_module else ("__init__", alias.name))
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
                    found.append((node.lineno, alias.name.split(".")[1], None))
    return found


def _graph() -> dict[str, dict[str, list[str]]]:
    """importer module -> imported module -> ["file:line", ...]."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module(path)
        for line, mod, _name in _imports(path):
            if mod != me:
                graph.setdefault(me, {}).setdefault(mod, []).append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return graph


def test_every_module_has_a_layer():
    modules = {_module(p) for p in PACKAGE.rglob("*.py")} - FACADE
    unplaced = sorted(m for m in modules if _layer(m) is None)
    assert not unplaced, f"put these modules into a layer in tests/test_layers.py: {unplaced}"


def test_imports_never_run_up_the_layers():
    wrong = []
    for importer, targets in _graph().items():
        if importer in FACADE:
            continue
        for target, where in targets.items():
            if target == "__init__":
                continue  # checked below: only dunder names such as __version__
            if _layer(target) is None or _layer(importer) is None:
                continue  # test_every_module_has_a_layer names them
            if _layer(target) > _layer(importer):
                wrong.append(f"{importer} (layer {_layer(importer) + 1}) imports {target} "
                             f"(layer {_layer(target) + 1}) at {', '.join(where)}")
    assert not wrong, "imports that run back up the layers:\n" + "\n".join(wrong)


def test_no_import_cycle():
    graph = {m: set(t) - {"__init__"} for m, t in _graph().items() if m not in FACADE}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_another_modules_private_names():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module(path)
        for line, mod, name in _imports(path):
            if mod == me or name is None:
                continue
            if mod == "__init__":
                if not (name.startswith("__") and name.endswith("__")):
                    wrong.append(f"{path.name}:{line} imports {name} from the package's __init__")
                continue
            if name.startswith("_") and not name.startswith("__"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}.{name}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


@pytest.mark.parametrize("source, expected", [
    ("from .engine import train\n", [("engine", "train")]),
    ("def f():\n    from .run import _now\n", [("run", "_now")]),
    ("from workbench.device import device\n", [("device", "device")]),
    ("from . import recipe\n", [("recipe", None)]),
    ("from . import __version__\n", [("__init__", "__version__")]),
    ("from ..shapes import buckets\n", [("shapes", "buckets")]),
])
def test_the_reader_sees_every_kind_of_import(tmp_path, source, expected, monkeypatch):
    """The checks above are only as good as the reader: each import form is found."""
    fake = tmp_path / "workbench"
    (fake / "bench").mkdir(parents=True)
    for name in ("engine", "run", "device", "recipe", "shapes"):
        (fake / f"{name}.py").write_text("")
    where = fake / ("bench/x.py" if source.startswith("from ..") else "x.py")
    where.write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert [(m, n) for _line, m, n in _imports(where)] == expected


def test_the_architecture_doc_lists_every_layer_as_the_test_does():
    """docs/architecture.md draws the layers; it must name the modules this test enforces."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    drawn = {}
    for line in doc.split("```")[1].splitlines():
        parts = line.split()
        if parts and parts[0].isdigit():
            drawn[int(parts[0])] = {p.rstrip("/") for p in parts[1:] if p.rstrip("/").isidentifier()}
    for i, names in enumerate(LAYERS, start=1):
        assert names <= drawn.get(i, set()), f"layer {i} in docs/architecture.md lacks {sorted(names - drawn.get(i, set()))}"
