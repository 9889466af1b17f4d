"""A buffer pool that forgets to give buffers back: leak B of train.py."""

import torch

_pool = []


def next_buffer(step: int) -> torch.Tensor:
    buffer = torch.empty(256, 1024, device="cuda")  # 1 MiB
    _pool.append(buffer)  # never released
    return buffer
