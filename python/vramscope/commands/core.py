"""The core's commands, and its options for the commands that take them too (run, compare)."""

from __future__ import annotations

import argparse
from typing import Any, Collection

from .. import _core


class _Given(argparse.Action):
    """Keeps each core option's text, in the order given, for the core to type (CommandOptions)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.given = [*namespace.given, (option_string, "" if values is None or values == [] else values)]


def spec(command: str) -> dict[str, Any]:
    return next(c for c in _core.commands() if c["name"] == command)


def add_core_options(parser: argparse.ArgumentParser, command: str, only: Collection[str] | None = None,
                     leave_out: Collection[str] = ()) -> None:
    """The options the core's `command` takes (only those named, or all but some), as its table
    says them; their texts go to args.given."""
    for option in spec(command)["options"]:
        if option["name"] in leave_out or (only is not None and option["name"] not in only):
            continue
        names = [option["name"], *filter(None, [option["alias"]])]
        parser.add_argument(*names, action=_Given, dest="given", nargs=None if option["value"] else 0,
                            metavar=option["value"] or None, help=option["help"], required=option["required"])
    parser.set_defaults(given=[])


def typed(command: str, args: argparse.Namespace) -> _core.CommandOptions:
    """The options given, typed by the core's rules (a UsageError names the one that is wrong)."""
    return _core.parse_options(command, args.given)


class CoreCommand:
    """A command the core runs whole: its inputs and options, typed, handed over."""

    def __init__(self, command: dict[str, Any]):
        self.NAME, self.HELP, self.inputs = command["name"], command["summary"], command["inputs"]

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("inputs", nargs="*", metavar=self.inputs)
        add_core_options(parser, self.NAME)

    def run(self, args: argparse.Namespace) -> int:
        return _core.run_command(self.NAME, args.inputs, typed(self.NAME, args))
