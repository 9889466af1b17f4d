"""The model the examples train: two linear layers around an activation written as a custom autograd
Function that keeps its input on `ctx` (as Fast-LLM's did) instead of `ctx.save_for_backward`.
`backward()` frees the tensors saved for it, never a ctx's attributes: whoever keeps a loss keeps
its graph, and through it each step's activation."""

import torch

WIDTH, HIDDEN, BATCH = 64, 256, 32


class KeepSiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.kept = x
        return torch.nn.functional.silu(x)

    @staticmethod
    def backward(ctx, grad):
        sigmoid = torch.sigmoid(ctx.kept)
        return grad * sigmoid * (1 + ctx.kept * (1 - sigmoid))


class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, HIDDEN)
        self.down = torch.nn.Linear(HIDDEN, 1)

    def forward(self, x):
        return self.down(KeepSiLU.apply(self.up(x)))


def model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = ToyModel()
    return model, torch.optim.SGD(model.parameters(), lr=1e-2)


def train_step(model, optimizer) -> torch.Tensor:
    """One optimizer step on a random batch; returns the loss, graph and all."""
    loss = model(torch.randn(BATCH, WIDTH)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss
