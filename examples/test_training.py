"""vramscope's pytest markers on the examples' model. The checks run with `pytest --vramscope`, or
with `vramscope = true` in the ini, as this folder's pytest.ini has it:

    pytest test_training.py
"""

import pytest

import vramscope
from toy_model import model_and_optimizer, train_step


# The leak of train_leak.py, which the check catches: expected to fail with vramscope's LeakError.
@pytest.mark.xfail(raises=vramscope.LeakError, strict=True, reason="each kept loss keeps its step's activation")
@pytest.mark.limit_gpu_leaks("4 KiB")          # bytes a step any allocation site may grow by
def test_keeping_each_loss_leaks(vram_steps):
    model, optimizer = model_and_optimizer()
    losses = []
    for _ in vram_steps(12):                   # a step ends after each item
        losses.append(train_step(model, optimizer))


@pytest.mark.limit_gpu_leaks("4 KiB")
@pytest.mark.limit_gpu_memory("2 GiB")         # peak allocated
def test_keeping_loss_values_does_not_leak(vram_steps):
    model, optimizer = model_and_optimizer()
    losses = []
    for _ in vram_steps(12):
        losses.append(train_step(model, optimizer).item())
