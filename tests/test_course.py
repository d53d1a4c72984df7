"""The course's notebooks, read as text: what a full preset names, the code uses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

import workbench

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _preset_names(source: str) -> list[str]:
    """Names a commented full-preset line assigns: ``# SIZE, STEPS = "small", 3000``."""
    names = []
    for line in source.splitlines():
        m = re.match(r"#\s*([A-Z_][A-Z0-9_]*(?:\s*,\s*[A-Z_][A-Z0-9_]*)*)\s*=", line)
        if m:
            names += [n.strip() for n in m.group(1).split(",")]
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_full_preset_name_is_a_parameter_the_code_uses(path):
    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{path.name}: one cell tagged 'parameters'"
    assigned = {n.id for node in ast.walk(ast.parse(params[0].source)) if isinstance(node, ast.Assign)
                for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    used = {n.id for c in cells if c is not params[0] for n in ast.walk(ast.parse(_code(c.source)))
            if isinstance(n, ast.Name)}
    for name in _preset_names(params[0].source):
        assert name in assigned, f"{path.name}: the full preset sets {name}, which has no smoke value"
        assert name in used, f"{path.name}: the full preset sets {name}, but no cell uses it"


def _code(source: str) -> str:
    """A cell's Python without IPython magics and shell lines."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def test_the_reader_finds_preset_names():
    assert _preset_names('x = 1\n# SIZE, MAX_STEPS = "8b", 1000\n# plain comment') == ["SIZE", "MAX_STEPS"]


# Modules that are public API themselves, beside what ``import workbench as wb`` serves:
# Optimum Habana's names, imported from here by changing one line (docs/optimum-habana.md)
PUBLIC_MODULES = {"workbench.compat.optimum_habana"}


def _private_uses(source: str) -> list[str]:
    """What a cell takes from inside the package: ``import workbench.X``, ``from workbench.X
    import ...``, ``from workbench import NAME`` or ``wb.NAME`` where NAME is no public name
    (``workbench.__all__``: what ``import workbench as wb`` serves)."""
    found = []
    for node in ast.walk(ast.parse(_code(source))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith("workbench.")]
        elif isinstance(node, ast.ImportFrom) and node.module in PUBLIC_MODULES:
            continue  # a public module of its own (the one-import-line move off a library)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "workbench":
            names = [a.name for a in node.names if node.module != "workbench" or a.name not in workbench.__all__]
            found += [f"from {node.module} import {', '.join(names)}"] if names else []
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "wb"
              and node.attr not in workbench.__all__):
            found.append(f"wb.{node.attr}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_uses_only_the_public_api(path):
    """A lesson teaches what a user can rely on: ``import workbench as wb`` and what ``wb.``
    serves (the CLIs run in a subprocess), never a module inside the package."""
    nb = nbformat.read(str(path), as_version=4)
    found = [use for c in nb.cells if c.cell_type == "code" for use in _private_uses(c.source)]
    assert not found, f"{path.name} uses the package's insides: {found}"


def test_the_reader_finds_what_a_cell_takes_from_inside_the_package():
    source = ("import workbench as wb\nimport workbench\nimport workbench.views as b\nimport workbenchy\n"
              "from workbench import views\nfrom workbench.shapes.buckets import padding_stats\n"
              "from workbench import record, bundled\n%load_ext workbench\nfrom workbenchy import x\n"
              "wb.train(wb.model('bert'), wb.dataset('digits'))\nwb.bundled.caption(3)\nrun.bundled")
    assert _private_uses(source) == ["import workbench.views", "from workbench import views",
                                     "from workbench.shapes.buckets import padding_stats",
                                     "from workbench import bundled", "wb.bundled"]
