"""The training callbacks on a GPU, with the allocator's events: a real transformers Trainer (a tiny
Llama from a config, no weights) and a Lightning module, each keeping 64 MiB a step. OOM is made
reachable on an 80 GB card by capping the process (the callback's capacity follows the cap) or by
giving the callback the capacity: a run without the callback dies of OOM; with it, it stops first,
with a checkpoint on disk and a report; a clean run is untouched; at an OOM the report is written
before the error propagates."""

import json
import os

import pytest

from tiny_trainers import lightning_module, llama_trainer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

CAP = 3 << 30  # bytes the process may allocate: about 45 leaked steps of 64 MiB
MAX_STEPS = 200
LEAK_ELEMENTS = 16 << 20  # float32: 64 MiB a step


@pytest.fixture
def capped():
    """The process capped at CAP (restored after), the allocator's cache emptied on both sides."""
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(CAP / torch.cuda.get_device_properties(0).total_memory)
    yield
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.empty_cache()


def report(directory) -> dict:
    with open(os.path.join(directory, "vramscope", "vramscope.json")) as f:
        return json.load(f)


def widened(output):
    """A step's output widened to the 64 MiB a leaking step keeps."""
    return output.flatten().repeat(LEAK_ELEMENTS // output.numel())


def capped_trainer(tmp_path, leak: bool, callbacks):
    return llama_trainer(tmp_path, keep=widened if leak else None, callbacks=callbacks, vocab=1024, hidden=128,
                         tokens=128, batch=8, max_steps=MAX_STEPS)


def test_without_the_callback_the_capped_leaking_trainer_dies_of_oom(tmp_path, capped):
    trainer = capped_trainer(tmp_path, leak=True, callbacks=[])
    with pytest.raises(torch.OutOfMemoryError):
        trainer.train()
    assert trainer.state.global_step < MAX_STEPS
    type(trainer).kept.clear()


@pytest.mark.parametrize("leak", [True, False], ids=["leaking", "clean"])
def test_hf_trainer_stops_before_oom_with_a_checkpoint_and_leaves_a_clean_run(tmp_path, capped, leak, capfd):
    from vramscope.integrations.hf import VramscopeCallback

    trainer = capped_trainer(tmp_path, leak, [VramscopeCallback()])
    trainer.train()  # never an OutOfMemoryError
    err = capfd.readouterr().err
    checkpoints = [p for p in os.listdir(tmp_path) if p.startswith("checkpoint-")]
    if leak:
        assert trainer.state.global_step < 45, err
        assert checkpoints == [f"checkpoint-{trainer.state.global_step}"]
        assert "model.safetensors" in os.listdir(tmp_path / checkpoints[0])
        assert "vramscope: leak: +64.0 MiB/step at test_integrations_gpu.py:" in err
        assert "vramscope: stopping the run at step" in err
        found = report(tmp_path)
        assert found["verdict"] == "leak" and found["devices"][0]["total_memory"] == pytest.approx(CAP, rel=0.01)
    else:
        assert trainer.state.global_step == MAX_STEPS and checkpoints == [], err
        assert report(tmp_path)["verdict"] == "no-leak"
    type(trainer).kept.clear()


def test_at_an_oom_the_report_is_written_before_the_error_propagates(tmp_path, capped, capfd):
    from vramscope.integrations.hf import VramscopeCallback

    callback = VramscopeCallback(stop_within_steps=None)
    trainer = capped_trainer(tmp_path, leak=True, callbacks=[callback])
    with pytest.raises(torch.OutOfMemoryError):
        trainer.train()
    assert "vramscope: CUDA out of memory on cuda:0" in capfd.readouterr().err
    assert report(tmp_path)["verdict"] == "leak"  # written by the OOM observer, before the raise
    type(trainer).kept.clear()
    callback.guard.finish()  # the Trainer never reached on_train_end: the capture is still on


@pytest.mark.parametrize("leak", [True, False], ids=["leaking", "clean"])
def test_lightning_stops_before_oom_with_a_checkpoint_and_leaves_a_clean_run(tmp_path, leak):
    from vramscope.integrations.lightning import VramscopeCallback

    # Each step's output (1 MiB) widened to 64 MiB and kept, when leaking.
    pl, module = lightning_module(width=1024, hidden=4096, keep=widened if leak else None)
    # The capacity given, not a cap: the run never reaches it, the projection does.
    callback = VramscopeCallback(device_memory="3 GiB")
    trainer = pl.Trainer(max_steps=MAX_STEPS, default_root_dir=str(tmp_path), callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, accelerator="gpu", devices=1)
    trainer.fit(module, torch.utils.data.DataLoader(torch.randn(256 * MAX_STEPS, 1024), batch_size=256))
    if leak:
        assert trainer.global_step < 45 and os.path.exists(callback.checkpoint)
        assert report(tmp_path)["verdict"] == "leak"
    else:
        assert trainer.global_step == MAX_STEPS and callback.checkpoint is None
        assert report(tmp_path)["verdict"] == "no-leak"
