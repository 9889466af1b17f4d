"""A CPU training loop that leaks: it keeps each step's loss, and the loss keeps its autograd graph,
whose KeepSiLU node keeps that step's activation (32 KiB a step).

    vramscope run -- python train_leak.py      # finds the leak, its line, and who holds it
"""

from toy_model import model_and_optimizer, train_step

STEPS = 30

model, optimizer = model_and_optimizer()
losses = []
for step in range(STEPS):
    loss = train_step(model, optimizer)
    losses.append(loss)
print(f"trained {STEPS} steps, last loss {losses[-1]:.4f}")
