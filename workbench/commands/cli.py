"""The ``workbench`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from ..version import __version__


def _cmd_devices(args: argparse.Namespace) -> int:
    from ..backends.registry import devices, fmt_bytes

    infos = devices()
    if args.json:
        print(json.dumps([d.to_dict() for d in infos], indent=2))
        return 0
    print(f"{'kind':<6}{'available':<11}{'count':<7}{'memory':<12}{'precision':<11}{'dist':<7}name")
    for d in infos:
        print(
            f"{d.kind:<6}{'yes' if d.available else 'no':<11}{d.count:<7}"
            f"{fmt_bytes(d.total_memory):<12}{d.precision if d.available else '-':<11}"
            f"{d.dist_backend:<7}{d.name}"
            + (f" ({d.generation}, {d.mode} mode)" if d.kind == "hpu" and d.available else "")
        )
    for d in infos:  # who holds each card, from the OS (processes with its device file open)
        if d.cards:
            print(f"\n{d.backend.title} cards:")
            for c in d.cards:
                print(f"  {c.describe()}")
    held = [c for d in infos for c in d.cards if not c.free]
    if held:  # the room: which user trains what on each card (complete when run as root)
        from ..server.holders import room

        print(f"\n{'card':<22}{'user':<14}{'pid':<9}{'step':<20}notebook / run")
        for r in room(held):
            step = f"{r['step']}/{r['max_steps'] or '?'} {r['status']}" if r["run"] else "-"
            where = " / ".join(x for x in (r["notebook"], r["run"]) if x) or "-"
            print(f"{r['card']:<22}{r['user'] or '?':<14}{r['pid']:<9}{step:<20}{where}")
    v = infos[0].versions
    print("versions: " + ", ".join(f"{k} {val or '-'}" for k, val in v.items()))
    return 0


def _value(text: str):
    """A parameter value from the command line: a Python literal if it is one, else text."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _kind(value) -> str:
    return {
        bool: "a bool",
        int: "an int",
        float: "a number",
        str: "text",
        list: "a list",
        tuple: "a tuple",
        dict: "a dict",
    }.get(type(value), type(value).__name__)


def checked_parameters(notebook, given: dict[str, str]) -> dict:
    """``-p NAME VALUE`` pairs as values, checked against the notebook's parameters cell:
    a name it does not assign, or a value of another type than its default, is refused."""
    from pathlib import Path

    from ..nbrecord import NOT_LITERAL, parameters

    nb = Path(notebook).name
    defaults = parameters(notebook)
    if defaults is None:
        if given:
            raise ValueError(f"{nb} has no cell tagged 'parameters': -p has nothing to set")
        return {}
    out = {}
    for name, text in given.items():
        if name not in defaults:
            raise ValueError(
                f"unknown parameter {name!r}; {nb}'s parameters: {', '.join(defaults)}"
            )
        value, default = _value(text), defaults[name]
        if default is NOT_LITERAL or default is None:
            ok = True
        elif isinstance(default, str):  # text stays text: -p SIZE 7 is the string '7'
            value, ok = value if isinstance(value, str) else text, True
        elif isinstance(default, bool) or not isinstance(default, (int, float)):
            ok = type(value) is type(default)
        else:  # a number: an int where an int is expected, an int or a float for a float
            ok = type(value) is int or (type(value) is float and isinstance(default, float))
            value = float(value) if ok and isinstance(default, float) else value
        if not ok:
            raise ValueError(
                f"-p {name}: {value!r} is not {_kind(default)} ({nb}'s parameters cell has "
                f"{name} = {default!r}); pass e.g. -p {name} {default!r}"
            )
        out[name] = value
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from datetime import datetime
    from pathlib import Path

    import papermill

    from ..nbrecord import records

    src = Path(args.notebook)
    if not src.exists():
        print(f"workbench run: no notebook at {src}", file=sys.stderr)
        return 2
    try:
        params = checked_parameters(src, dict(args.parameter or []))
    except ValueError as e:
        print(f"workbench run: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{src.stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}.ipynb"
    print(f"running {src} with {params or 'its default parameters'} -> {out}", file=sys.stderr)
    try:
        papermill.execute_notebook(
            str(src),
            str(out),
            parameters=params,
            kernel_name=args.kernel,
            progress_bar=False,
            cwd=args.cwd,
        )
    except papermill.PapermillExecutionError as e:
        print(
            f"failed in cell {e.exec_count}: {e.ename}: {e.evalue}\nexecuted notebook: {out}",
            file=sys.stderr,
        )
        return 1
    print(f"executed notebook: {out}")
    print(json.dumps(records(out), indent=2))
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    import contextlib

    from ..checks.checkup import doctor

    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    try:
        # what libraries print: stdout keeps the report
        with contextlib.redirect_stdout(sys.stderr):
            report = doctor(args.out, multi=args.multi, device=args.device, only=only)
    except ValueError as e:  # an unknown check or device name lists the known ones
        print(f"workbench doctor: {e}", file=sys.stderr)
        return 2
    print(report.to_json() if args.json else report.table())
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workbench", description="Gaudi Workbench")
    p.add_argument("--version", action="version", version=f"gaudi-workbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("devices", help="list hpu, cuda and cpu with their availability")
    d.add_argument("--json", action="store_true", help="print JSON instead of a table")
    d.set_defaults(func=_cmd_devices)
    r = sub.add_parser("run", help="execute a notebook with papermill and print its records")
    r.add_argument("notebook")
    r.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("KEY", "VALUE"),
        help="set a parameter (repeatable); values are Python literals or text",
    )
    r.add_argument(
        "--output-dir", default="runs/notebooks", help="where the executed notebook goes"
    )
    r.add_argument("--kernel", default="python3")
    r.add_argument("--cwd", default=".", help="working directory of the kernel")
    r.set_defaults(func=_cmd_run)
    doc = sub.add_parser(
        "doctor",
        help="check this machine: versions, device, short training runs, bf16, "
        "collectives, profiling (exit code 1 when a check fails)",
    )
    doc.add_argument("--out", default="doctor", help="where report.json, report.md and the runs go")
    doc.add_argument(
        "--multi", action="store_true", help="on a CPU, also run the 2-process checks (~30 s)"
    )
    doc.add_argument(
        "--json", action="store_true", help="print the JSON report instead of the table"
    )
    doc.add_argument(
        "--device",
        default="auto",
        help="the device to check: hpu, cuda or cpu (default: the one wb.train would use)",
    )
    doc.add_argument(
        "--only", metavar="NAMES", help="comma-separated checks or groups, e.g. versions,gpt2"
    )
    doc.set_defaults(func=_cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
