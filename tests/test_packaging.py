"""The set-up files agree with each other."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from conftest import ROOT

pytestmark = pytest.mark.policy  # files only: `make lint` runs these


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("_", "-")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_has_every_runtime_dependency():
    deps = _pyproject()["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(pip) == sorted(deps), "environment.yml and pyproject.toml dependencies differ"


def test_torch_has_only_a_lower_bound():
    torch = [d for d in _pyproject()["project"]["dependencies"] if _name(d) == "torch"]
    assert len(torch) == 1 and re.fullmatch(r"torch>=[\d.]+", torch[0]), (
        "Gaudi containers bring their own torch: never pin it"
    )


def test_constraints_pin_every_runtime_dependency():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_name(name)] = version
    assert pins["torch"] == "2.13.0"
    for dep in _pyproject()["project"]["dependencies"]:
        assert _name(dep) in pins, f"{dep} is not pinned in constraints.txt"


def test_readme_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("make lab") < text.index("make test") < text.index("## ", text.index("make lab"))


def test_code_passes_ruff():
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    ruff = Path(sys.executable).with_name("ruff")
    ruff = str(ruff) if ruff.exists() else shutil.which("ruff")
    assert ruff, "ruff is part of the dev extra; run `make test` to install it"
    out = subprocess.run([ruff, "check", "--output-format", "concise", "workbench", "benchmarks", "tests", "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # the package is kept as `ruff format` writes it (100 columns, E501 on for workbench/)
    out = subprocess.run([ruff, "format", "--check", "workbench", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr + "\nfix: ruff format workbench benchmarks"


def test_the_wheel_ships_the_package_and_not_the_benchmarks():
    """The benchmarks are the repository's developer package (benchmarks/, beside their data):
    the wheel holds workbench/ only, its built assets and shared data come from inside the
    package or the Jupyter config, and nothing in the package imports the benchmarks (a wheel
    user would meet an ImportError)."""
    import ast

    build = _pyproject()["tool"]["hatch"]["build"]
    wheel = build["targets"]["wheel"]
    assert wheel["packages"] == ["workbench"], wheel["packages"]
    assert "include" not in wheel and "force-include" not in wheel, "the wheel's files come from packages"
    sources = [*build["artifacts"], *wheel["shared-data"]]
    assert sources and all(s.split("/")[0] in ("workbench", "jupyter-config") for s in sources), sources
    assert (ROOT / "benchmarks" / "__init__.py").exists() and not (ROOT / "workbench" / "bench").exists()
    importers = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            importers += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "benchmarks"]
    assert not importers, importers
