"""The ``workbench`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__


def _cmd_devices(args: argparse.Namespace) -> int:
    from .device import _fmt_bytes, devices

    infos = devices()
    if args.json:
        print(json.dumps([d.to_dict() for d in infos], indent=2))
        return 0
    print(f"{'kind':<6}{'available':<11}{'count':<7}{'memory':<12}{'precision':<11}{'dist':<7}name")
    for d in infos:
        print(
            f"{d.kind:<6}{'yes' if d.available else 'no':<11}{d.count:<7}"
            f"{_fmt_bytes(d.total_memory):<12}{d.precision if d.available else '-':<11}"
            f"{d.dist_backend:<7}{d.name}"
            + (f" ({d.generation}, {d.mode} mode)" if d.kind == "hpu" and d.available else "")
        )
    v = infos[0].versions
    print("versions: " + ", ".join(f"{k} {val or '-'}" for k, val in v.items()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workbench", description="Gaudi Workbench")
    p.add_argument("--version", action="version", version=f"gaudi-workbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("devices", help="list hpu, cuda and cpu with their availability")
    d.add_argument("--json", action="store_true", help="print JSON instead of a table")
    d.set_defaults(func=_cmd_devices)
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
