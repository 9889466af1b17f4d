"""What a capture says on stderr while the run goes on."""

from __future__ import annotations

import sys

_warned: set[str] = set()


def say(text: str) -> None:
    print(f"vramscope: {text}", file=sys.stderr, flush=True)


def warn(message: str, key: str | None = None) -> None:
    """Once per process and kind, on stderr, never raising."""
    key = key or message
    if key in _warned:
        return
    _warned.add(key)
    try:
        say(message)
    except Exception:
        pass
