"""`vramscope mcp`: the Model Context Protocol server over stdio (mcp_server.py), for agents."""

from __future__ import annotations

import argparse
import importlib.util
import sys

NAME = "mcp"
HELP = """Serve vramscope to agents: a Model Context Protocol server on stdin and stdout. Its tools
(analyze, leaks, owners, peak, diff, compare_table) each take a path and answer in text and in
the findings' own fields. Needs the MCP SDK: pip install 'vramscope[mcp]'. A client starts it as
`vramscope mcp`; it ends when the client closes stdin."""


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    """No options: a client sets the server up by the tools it calls."""


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        print("vramscope mcp: the MCP SDK is not installed here: pip install 'vramscope[mcp]'", file=sys.stderr)
        return 2
    from ..mcp_server import serve

    serve()
    return 0
