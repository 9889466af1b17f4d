"""Two ranks under torchrun, captured by `vramscope run` (needs 2 GPUs: the nvidia-h200-x2 kind)."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = """
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = DDP(torch.nn.Linear(2048, 2048).cuda(), device_ids=[rank])
opt = torch.optim.AdamW(model.parameters())
history = []
for step in range(40):
    loss = model(torch.randn(64, 2048, device="cuda")).pow(2).mean()
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    if rank == 1:
        history.append(torch.empty(1 << 19, device="cuda"))  # rank 1 only: 2 MiB a step
dist.destroy_process_group()
"""


def test_each_rank_writes_its_file_and_skew_is_flagged(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "ddp.vscope"
    proc = subprocess.run([sys.executable, "-m", "vramscope", "run", "-o", str(out), "--", sys.executable, "-m",
                           "torch.distributed.run", "--nproc_per_node", "2", str(script)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "ddp.rank0.vscope").exists() and (tmp_path / "ddp.rank1.vscope").exists()
    assert not (tmp_path / "ddp.vscope").exists(), "the torchrun launcher itself never used CUDA"
    assert "RANK SKEW" in proc.stdout and "rank 1 leaks, rank 0 does not" in proc.stdout
    line = textwrap.dedent(SCRIPT).splitlines().index(next(x for x in textwrap.dedent(SCRIPT).splitlines()
                                                            if "history.append" in x)) + 1
    assert f"leak: +2.0 MiB/step at ddp.py:{line} <module> (cuda:1" in proc.stderr
