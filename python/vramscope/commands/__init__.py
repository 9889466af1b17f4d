"""The `vramscope` command line: one registry, one parser per command (memray's commands/ is the
model). Each command has NAME, HELP, prepare_parser(parser) and run(args) -> exit code. The core's
commands (analyze, report, diff, export, convert, compare-table) are one class over the core's table of
options (src/vramscope/cli/options.h): every option is defined there, once, and its text typed
there, once, whether `vramscope` or the standalone `vramscope-core` parsed the command line."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import NoReturn, Protocol

from .. import __version__, _core
from . import attach, compare, demo, mcp, run
from .core import CoreCommand

ORDER = ("analyze", "run", "attach", "report", "diff", "compare", "compare-table", "export", "convert", "demo", "mcp")


class Command(Protocol):
    """What the registry holds: a command module, or the class over one of the core's commands."""

    NAME: str
    HELP: str

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


class Parser(argparse.ArgumentParser):
    """A usage error is its message and a one-line hint, never the whole help (which buried it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\nTry '{self.prog} --help'.\n")


def registry() -> dict[str, Command]:
    commands: dict[str, Command] = {c["name"]: CoreCommand(c) for c in _core.commands()}
    commands.update({m.NAME: m for m in (run, attach, compare, demo, mcp)})
    return {name: commands[name] for name in ORDER}


def first_sentence(text: str) -> str:
    """What a command does, as the overview says it: its help's first sentence, whole."""
    words = " ".join(text.split())
    end = words.find(". ")
    return words if end < 0 else words[:end + 1]


def overview(commands: dict[str, Command]) -> str:
    lines = ["usage: vramscope COMMAND ...   (vramscope COMMAND --help: its options)", ""]
    for name, command in commands.items():
        lines.append(f"  {name:<15}{first_sentence(command.HELP)}")
    lines.append(f"  {'--version, -V':<15}print the version")
    return "\n".join(lines)


def values_that_look_like_options(parser: Parser, argv: list[str]) -> list[str]:
    """`--device-memory -5GiB` as `--device-memory=-5GiB`: argparse would take the value for an
    option and say "expected one argument"; the option's own rule then says what is wrong with it."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":  # what follows is the user's command, never ours to read
            return out + argv[i:]
        action = parser._option_string_actions.get(argv[i])
        if (action is not None and action.nargs is None and i + 1 < len(argv) and argv[i + 1].startswith("-")
                and argv[i + 1] not in parser._option_string_actions and argv[i + 1] != "--"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def parse(command: Command, parser: Parser, argv: list[str]) -> argparse.Namespace:
    """The arguments; a command that runs another takes it after `--` (or from its first word)."""
    argv = values_that_look_like_options(parser, argv)
    if getattr(command, "TAKES_COMMAND", False):
        cut = argv.index("--") if "--" in argv else None
        args = parser.parse_args(argv[:cut] if cut is not None else argv)
        if cut is not None:
            args.command = [*args.command, *argv[cut + 1:]] if args.command else argv[cut + 1:]
        return args
    return parser.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = registry()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(overview(commands))
        return 0 if argv else 2
    if argv[0] in ("--version", "-V", "version"):
        print(f"vramscope {__version__}")
        return 0
    command = commands.get(argv[0])
    top = Parser(prog="vramscope")
    if command is None:
        close = difflib.get_close_matches(argv[0], commands, n=1)
        top.error(f"unknown command {_core.terminal_safe(argv[0])!r}"
                  + (f": did you mean {close[0]}?" if close else f" ({', '.join(commands)})"))
    parser = Parser(prog=f"vramscope {argv[0]}", description=command.HELP,
                    formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    command.prepare_parser(parser)
    try:
        args = parse(command, parser, argv[1:])
        sys.stdout.flush()
        return command.run(args)
    except _core.UsageError as e:
        parser.error(str(e))
    except BrokenPipeError:  # the reader went away (`vramscope demo | head -1`): end quietly, as git does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor a complaint at exit's flush
        return 0
    except OSError as e:  # stdout full: as the core says it, exit 2
        print(f"vramscope: error: {e.strerror or e}", file=sys.stderr)
        return 2
