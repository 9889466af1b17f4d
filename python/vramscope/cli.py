"""The `vramscope` entry point: the command registry (commands/) parses and dispatches."""

from __future__ import annotations

import sys

from .commands import main

if __name__ == "__main__":
    sys.exit(main())
