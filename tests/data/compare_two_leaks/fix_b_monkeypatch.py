"""Candidate fix B, as a monkeypatch preloaded by `vramscope compare` (preload = this file): the
pool keeps only the latest buffer."""

import os
import sys

sys.path.insert(0, os.getcwd())  # the project, which the script's own directory will be
import toy_prefetch  # noqa: E402


def next_buffer(step):
    toy_prefetch._pool[:] = [toy_prefetch.torch.empty(256, 1024, device="cuda")]
    return toy_prefetch._pool[0]


toy_prefetch.next_buffer = next_buffer
