"""Two ranks of Lightning's DDP on CPU (gloo), of which only rank 1 leaks: run by test_integrations.py.
Prints the step each rank stopped at."""

import sys
import torch
import lightning.pytorch as pl
from vramscope.capture import Source
from vramscope.integrations.lightning import VramscopeCallback


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
        self.training_step_outputs = []

    def training_step(self, batch, batch_idx):
        out = self.net(batch)
        if self.global_rank == 1:  # only rank 1 leaks
            self.training_step_outputs.append(out.detach())
        return out.pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    out = sys.argv[1]
    callback = VramscopeCallback(device_memory="1 MiB", source=Source.live_tensors)
    trainer = pl.Trainer(max_steps=40, default_root_dir=out, callbacks=[callback], enable_checkpointing=False,
                         logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                         devices=2, strategy="ddp")
    trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(64 * 80, 32), batch_size=64))
    print(f"rank {trainer.global_rank} stopped at step {trainer.global_step}", flush=True)
