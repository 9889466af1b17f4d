"""Prevent leaks: hold a test, a function or a training run to a leak rate and a peak (pytest markers
in pytest_plugin.py, `assert_no_leak` in check.py, framework callbacks in vramscope.integrations)."""

from .check import CannotJudgeError, LeakCheck, PeakError, assert_no_leak
from .limits import parse_size

__all__ = ["CannotJudgeError", "LeakCheck", "PeakError", "assert_no_leak", "parse_size"]
