"""Two ranks of Lightning's DDP on CPU (gloo), of which only rank 1 leaks: run by test_integrations.py.
Prints the step each rank stopped at."""

import sys

import torch
from tiny_trainers import lightning_module
from vramscope.capture import Source
from vramscope.integrations.lightning import VramscopeCallback


if __name__ == "__main__":
    root = sys.argv[1]
    pl, module = lightning_module(width=32, hidden=64, keep=lambda out: out, on_rank=1)  # only rank 1 leaks
    callback = VramscopeCallback(device_memory="1 MiB", source=Source.live_tensors)
    trainer = pl.Trainer(max_steps=40, default_root_dir=root, callbacks=[callback], enable_checkpointing=False,
                         logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                         devices=2, strategy="ddp")
    trainer.fit(module, torch.utils.data.DataLoader(torch.randn(64 * 80, 32), batch_size=64))
    print(f"rank {trainer.global_rank} stopped at step {trainer.global_step}", flush=True)
