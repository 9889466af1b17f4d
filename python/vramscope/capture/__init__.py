"""Live capture: allocator events of a running PyTorch process into a .vscope trace."""

from .session import Capture, LeakError, Source, active, mark, step, track

__all__ = ["Capture", "LeakError", "Source", "active", "mark", "step", "track"]
