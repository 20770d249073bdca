"""The `codedojo` command. Each package contributes its subcommands through a `register` function in
its own `cli` module; those modules import nothing heavy at import time, so `codedojo --help` is fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules with `register(subparsers)`; each adds parsers whose defaults carry `func(args) -> int`.
COMMAND_MODULES = (
    "codedojo.rollout.cli",
    "codedojo.data.cli",
    "codedojo.inference.cli",
    "codedojo.tasks.cli",
    "codedojo.train.cli",
    "codedojo.train.sft_cli",
    "codedojo.trial.cli",
)


def positive_int(text: str) -> int:
    """An argparse type for counts and sizes: an integer of at least 1 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(text: str) -> int:
    """An argparse type for a TCP port: 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 (any free port) to 65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codedojo", description="Train multi-turn coding agents with reinforcement learning.")
    parser.add_argument("--version", action="version", version=f"codedojo {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    from codedojo import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
