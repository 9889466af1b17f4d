"""The training callbacks on CPU, where the frameworks allow it: a planted leak stops the run with a
checkpoint and a report, a clean run is left alone; the stop decision is the same on every rank.
The callbacks are told to judge live tensors (the default without CUDA; the same
tests run on a GPU machine), and `device_memory` gives them a capacity to project the OOM against. (On the GPU: test_integrations_gpu.py.)"""

import json
import os
import sys

import pytest

from tiny_trainers import lightning_module, llama_trainer
from vramscope.capture import Source

torch = pytest.importorskip("torch")

MAX_STEPS = 40
# With 1 MiB of room, a leak of 8 KiB a step or more is projected to run out within the guard's 50 steps
# as soon as the live monitor confirms it (about 11 steps in: 3 of warm-up, 8 to judge).
ROOM = "1 MiB"


def report(directory, name: str = "vramscope.json") -> dict:
    with open(os.path.join(directory, "vramscope", name)) as f:
        return json.load(f)


@pytest.mark.parametrize("leak", [True, False], ids=["leaking", "clean"])
def test_hf_trainer_stops_a_leaking_run_with_a_checkpoint_and_leaves_a_clean_one(tmp_path, leak, capfd):
    from vramscope.integrations.hf import VramscopeCallback

    # The logits of each step, 32 KiB, kept "for a metric computed later".
    callback = VramscopeCallback(device_memory=ROOM, source=Source.live_tensors)
    trainer = llama_trainer(tmp_path, keep=(lambda logits: logits) if leak else None, callbacks=[callback],
                            vocab=128, hidden=32, tokens=16, batch=4, max_steps=MAX_STEPS, use_cpu=True)
    trainer.train()
    checkpoints = [p for p in os.listdir(tmp_path) if p.startswith("checkpoint-")]
    err = capfd.readouterr().err
    if leak:
        assert trainer.state.global_step < MAX_STEPS
        assert checkpoints == [f"checkpoint-{trainer.state.global_step}"]
        assert "model.safetensors" in os.listdir(tmp_path / checkpoints[0])
        assert "vramscope: leak: +32.0 KiB/step at tiny_trainers.py:" in err  # where the logits are kept
        assert f"vramscope: stopping the run at step {trainer.state.global_step}: OOM projected at step" in err
        assert report(tmp_path)["verdict"] == "leak"
        assert os.path.exists(tmp_path / "vramscope" / "vramscope.html")
    else:
        assert trainer.state.global_step == MAX_STEPS and checkpoints == []
        assert "vramscope: stopping" not in err
        assert report(tmp_path)["verdict"] == "no-leak"


@pytest.mark.parametrize("leak", [True, False], ids=["leaking", "clean"])
def test_lightning_stops_a_leaking_run_with_a_checkpoint_and_leaves_a_clean_one(tmp_path, leak, capfd):
    from vramscope.integrations.lightning import VramscopeCallback

    pl, module = lightning_module(width=32, hidden=64, keep=(lambda out: out) if leak else None)  # 8 KiB a step
    callback = VramscopeCallback(device_memory=ROOM, source=Source.live_tensors)
    trainer = pl.Trainer(max_steps=MAX_STEPS, default_root_dir=str(tmp_path), callbacks=[callback],
                         enable_checkpointing=False, logger=False, enable_progress_bar=False, accelerator="cpu")
    trainer.fit(module, torch.utils.data.DataLoader(torch.randn(64 * MAX_STEPS, 32), batch_size=64))
    err = capfd.readouterr().err
    if leak:
        assert trainer.global_step < MAX_STEPS
        assert callback.checkpoint and os.path.exists(callback.checkpoint)
        assert "training_step_outputs[" in err  # who holds it, found while training
        assert report(tmp_path)["verdict"] == "leak"
    else:
        assert trainer.global_step == MAX_STEPS and callback.checkpoint is None
        assert report(tmp_path)["verdict"] == "no-leak"


RANKS = """
import os, sys
import torch.distributed as dist
from vramscope.integrations.guard import _any_rank

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=int(sys.argv[1]), world_size=2)
said = [_any_rank(int(sys.argv[1]) == 1 and step == 3) for step in range(5)]  # only rank 1, only at step 3
print(said)
dist.destroy_process_group()
"""


def test_one_ranks_reason_to_stop_stops_every_rank_at_the_same_step():
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    ranks = [subprocess.Popen([sys.executable, "-c", RANKS, str(rank), port], stdout=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [rank.communicate(timeout=120)[0].strip() for rank in ranks]
    assert outs == ["[False, False, False, True, False]"] * 2


def test_a_fault_in_the_guard_is_one_warning_and_training_goes_on(tmp_path, capfd):
    from vramscope.integrations.guard import Guard

    guard = Guard(tmp_path, source=Source.live_tensors, max_leak="1 KiB")
    guard.start()
    try:
        def broken():
            raise RuntimeError("disk on fire")

        guard.capture.leaking = broken
        torch.ones(64) * 2  # something for the capture to have seen
        assert guard.should_stop(1) is False  # never raises into the loop
        assert guard.should_stop(2) is False  # and keeps deciding "go on", on every rank alike
        capture = guard.capture
    finally:
        guard.finish()
    err = capfd.readouterr().err
    assert err.count("the training guard failed (RuntimeError: disk on fire); it no longer stops the run") == 1
    assert not capture.active and guard.report_paths  # the capture still ended, with its report


def test_under_lightning_ddp_one_leaking_rank_stops_both_at_the_same_step_with_a_trace_each(tmp_path):
    import subprocess

    pytest.importorskip("lightning.pytorch")
    script = os.path.join(os.path.dirname(__file__), "lightning_ddp.py")
    run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=300)
    stopped = sorted(line for line in run.stdout.splitlines() if " stopped at step " in line)
    assert len(stopped) == 2, run.stdout + run.stderr
    steps = {line.rsplit(" ", 1)[1] for line in stopped}
    assert len(steps) == 1 and int(steps.pop()) < MAX_STEPS, stopped
    assert "another rank's guard stopped the run" in run.stderr  # rank 0, which does not leak
    assert [report(tmp_path, f"vramscope.rank{rank}.json")["verdict"] for rank in (0, 1)] == ["no-leak", "leak"]
