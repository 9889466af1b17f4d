"""train_leak.py fixed: it keeps each step's loss as a number, so no graph, and no activation,
outlives its step.

    vramscope run -- python train_fixed.py     # no leak
"""

from toy_model import model_and_optimizer, train_step

STEPS = 30

model, optimizer = model_and_optimizer()
losses = []
for step in range(STEPS):
    loss = train_step(model, optimizer)
    losses.append(loss.item())
print(f"trained {STEPS} steps, last loss {losses[-1]:.4f}")
