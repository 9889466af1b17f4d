"""Steps where users count them, on CPU (live tensors): transformers' evaluation and prediction
batches, Lightning's validation, test and predict batches and generate() calls end steps in loops
with no optimizer, each marker naming its unit; the strongest source seen owns the steps; the
framework hooks go in when the framework is imported and come out when the capture ends."""

import json
import subprocess
import sys
import textwrap

import pytest

import vramscope
from tiny_trainers import llama_trainer
from vramscope.capture import Capture, Source, torch_hooks
from vramscope.capture.session import StepUnit

torch = pytest.importorskip("torch")


def captured(tmp_path, run) -> dict:
    """The steps of the findings of a capture of run() (live tensors, analysed at its end)."""
    capture = Capture(tmp_path / "steps.vscope", summary=False, live_warnings=False, explain=False,
                      source=Source.live_tensors).start()
    try:
        run()
    finally:
        capture.stop()
    assert capture.findings is not None, capture.off_reason
    return capture.findings["steps"]


def tiny_trainer(tmp_path, max_steps=4):
    """A Trainer over a tiny Llama whose dataset is 4 batches of 2."""
    return llama_trainer(tmp_path, keep=None, callbacks=[], vocab=64, hidden=32, tokens=8, batch=2,
                         max_steps=max_steps, use_cpu=True, per_device_eval_batch_size=2)


def test_hf_evaluate_ends_a_step_per_eval_batch(tmp_path):
    trainer = tiny_trainer(tmp_path)
    steps = captured(tmp_path, lambda: trainer.evaluate(trainer.train_dataset))
    assert (steps["unit"], steps["count"]) == ("eval batch", 4)


def test_hf_predict_ends_a_step_per_predict_batch(tmp_path):
    trainer = tiny_trainer(tmp_path)
    steps = captured(tmp_path, lambda: trainer.predict(trainer.train_dataset))
    assert (steps["unit"], steps["count"]) == ("predict batch", 4)


def test_after_training_the_optimizer_owns_the_steps_and_evaluation_ends_none(tmp_path):
    trainer = tiny_trainer(tmp_path, max_steps=6)
    steps = captured(tmp_path, lambda: (trainer.train(), trainer.evaluate(trainer.train_dataset)))
    assert (steps["unit"], steps["count"]) == ("optimizer step", 6)


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                      pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return transformers.LlamaForCausalLM(config).eval()


def generate(model, new_tokens: int):
    return model.generate(torch.randint(3, 64, (1, 5)), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False)


def test_each_generate_call_is_a_step_whatever_the_tokens_it_decodes(tmp_path):
    model = tiny_llama()
    steps = captured(tmp_path, lambda: [generate(model, 2 + turn % 5) for turn in range(6)])
    assert (steps["unit"], steps["count"]) == ("generate() call", 6)


def test_once_vramscope_step_is_called_generate_calls_end_no_step(tmp_path):
    model = tiny_llama()

    def chat():
        for _ in range(3):
            generate(model, 3)  # three generate() calls: three steps
        for _ in range(6):
            generate(model, 3)  # two more steps, before the first vramscope.step()
            generate(model, 2)
            vramscope.step()  # from here on, only these: six

    steps = captured(tmp_path, chat)
    assert (steps["unit"], steps["count"]) == ("vramscope.step()", 3 + 2 + 6)


def lightning_module():
    pl = pytest.importorskip("lightning.pytorch")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(16, 16)

        def training_step(self, batch, batch_idx):
            return self.net(batch).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            return self.net(batch).pow(2).mean()

        def test_step(self, batch, batch_idx):
            return self.net(batch).pow(2).mean()

        def predict_step(self, batch, batch_idx):
            return self.net(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def trainer(tmp_path, **kwargs):
        return pl.Trainer(default_root_dir=str(tmp_path), logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", **kwargs)

    return Module(), trainer


def batches(n: int):
    return torch.utils.data.DataLoader(torch.randn(8 * n, 16), batch_size=8)


@pytest.mark.parametrize("loop,unit", [("validate", "validation batch"), ("test", "test batch"),
                                       ("predict", "predict batch")])
def test_lightning_evaluation_loops_end_a_step_per_batch_without_the_callback(tmp_path, loop, unit):
    module, trainer = lightning_module()
    steps = captured(tmp_path, lambda: getattr(trainer(tmp_path), loop)(module, batches(5)))
    assert (steps["unit"], steps["count"]) == (unit, 5)


def test_lightning_fit_counts_optimizer_steps_not_its_validation_or_sanity_check_batches(tmp_path):
    module, trainer = lightning_module()
    fit = trainer(tmp_path, max_steps=6, val_check_interval=3, num_sanity_val_steps=2)
    steps = captured(tmp_path, lambda: fit.fit(module, batches(6), batches(4)))
    assert (steps["unit"], steps["count"]) == ("optimizer step", 6)


def test_the_strongest_source_seen_owns_the_steps(tmp_path):
    """The ranking alone, through the capture's own entry point, in the order sources might come."""
    said, units = [], []

    class Recorder:  # what the capture hands the unit of each step it ends, and of each unit inside one
        steps = 0

        def end_step(self, unit, pools=()):  # pools: the libraries' own counts (capture/pools.py)
            said.append(unit)
            return []

        def marker(self, kind, name):
            units.append(name)

        def rising_in_step(self, unit_marker):
            return []

        def fault(self):
            return ""

    capture = Capture(tmp_path / "ranking.vscope")
    capture._recorder = Recorder()
    for unit in [StepUnit.generate_call, StepUnit.eval_batch, StepUnit.generate_call, StepUnit.predict_batch,
                 StepUnit.optimizer, StepUnit.eval_batch, StepUnit.optimizer, StepUnit.explicit,
                 StepUnit.optimizer, StepUnit.explicit]:
        capture._step_ended(unit)
    assert said == ["generate() call", "eval batch", "predict batch", "optimizer step", "optimizer step",
                    "vramscope.step()", "vramscope.step()"]
    # The weaker sources' ends once a stronger one owns the steps: the eval batch between two
    # optimizer steps; the generate() call before it ended a step of its own.
    assert units == ["generate() call", "eval batch"]


LAZY = """
import sys
import torch
from vramscope.capture import Capture, Source

capture = Capture(sys.argv[1], summary=False, live_warnings=False, explain=False, source=Source.live_tensors).start()
assert "transformers" not in sys.modules and "lightning" not in sys.modules  # nothing imported for them
import transformers.generation.utils as generation
import transformers.trainer as trainer
import lightning.pytorch.trainer.call as call
def hooked():
    return [generation.GenerationMixin.generate, trainer.Trainer.predict, trainer.CallbackHandler.on_prediction_step,
            call._call_callback_hooks]
originals = [f.__wrapped__ for f in hooked()]  # the hooks wrap the framework's own functions
capture.stop()
assert all(now is original for now, original in zip(hooked(), originals)), hooked()
print("ok")
"""


def test_frameworks_imported_after_the_capture_starts_are_hooked_and_unhooked_at_its_end(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("lightning.pytorch")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(LAZY), str(tmp_path / "lazy.vscope")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_a_hook_that_cannot_go_in_is_said_once_and_the_module_imports_as_ever(tmp_path, monkeypatch):
    (tmp_path / "vramscope_step_source_probe.py").write_text("def batch_end():\n    return 'ran'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    faults, undone = [], []

    def patch(module):
        undone.append(torch_hooks._wrap(module, "batch_end", lambda f: lambda: f() + " and hooked"))
        return undone[0]

    undo_good = torch_hooks.after_import("vramscope_step_source_probe", patch, faults.append)
    undo_bad = torch_hooks.after_import("vramscope_step_source_probe", lambda module: module.no_such_hook,
                                        faults.append)
    import vramscope_step_source_probe as probe

    assert probe.batch_end() == "ran and hooked"
    assert len(faults) == 1 and "vramscope_step_source_probe could not be followed (AttributeError" in faults[0]
    undo_bad()
    undo_good()
    assert probe.batch_end() == "ran"
    del sys.modules["vramscope_step_source_probe"]


def test_lightning_callback_captures_a_validate_run_on_its_own(tmp_path):
    import json

    from vramscope.integrations.lightning import VramscopeCallback

    module, trainer = lightning_module()
    trainer(tmp_path, callbacks=[VramscopeCallback(source=Source.live_tensors)]).validate(module, batches(5))
    with open(tmp_path / "vramscope" / "validate" / "vramscope.json") as f:
        steps = json.load(f)["steps"]
    assert (steps["unit"], steps["count"]) == ("validation batch", 5)


REBUILT = """
import json, sys, torch
from vramscope.capture import Capture, Source

def main(path, every):
    model = torch.nn.Linear(256, 256)
    schedulers = []  # kept: each holds its optimizer, and so its state (the bug)
    capture = Capture(path, summary=False, live_warnings=False, explain=False, source=Source.live_tensors).start()
    for step in range(16):
        if step % every == 0:
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            schedulers.append(torch.optim.lr_scheduler.StepLR(opt, step_size=10))
        model(torch.randn(32, 256)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    capture.stop()
    f = capture.findings
    print(json.dumps({"steps": f["steps"]["count"], "verdict": f["verdict"],
                      "rate": f["leaks"][0]["bytes_per_step"] if f["leaks"] else 0}))

main(sys.argv[1], int(sys.argv[2]))
"""


@pytest.mark.parametrize("every", [1, 4])
def test_an_optimizer_rebuilt_every_round_hands_its_role_to_the_next(tmp_path, every):
    """Federated rounds, curricula: a new optimizer (and scheduler) each round over the same
    parameters. Each one's steps end steps; the old schedulers kept keep their optimizers' state,
    Adam's two moments of the 256x256 layer and its bias per round: the leak, at its rate."""
    proc = subprocess.run([sys.executable, "-c", REBUILT, str(tmp_path / "rebuilt.vscope"), str(every)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["steps"] == 16, found
    assert found["verdict"] == "leak", found
    state_per_round = 2 * (256 * 256 + 256) * 4
    assert abs(found["rate"] - state_per_round / every) <= 0.1 * state_per_round / every, found


def test_two_optimizers_over_other_parameters_step_within_one_step(tmp_path):
    """A GAN: the discriminator's and the generator's optimizers step each iteration; the first
    one's steps are the steps."""
    def run():
        generator, discriminator = torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)
        g_opt, d_opt = torch.optim.SGD(generator.parameters(), lr=0.1), torch.optim.SGD(discriminator.parameters(), lr=0.1)
        for _ in range(6):
            discriminator(generator(torch.randn(8, 16)).detach()).mean().backward()
            d_opt.step()
            d_opt.zero_grad()
            discriminator(generator(torch.randn(8, 16))).mean().backward()
            g_opt.step()
            g_opt.zero_grad()

    assert captured(tmp_path, run)["count"] == 6


def captured_findings(tmp_path, run, **kw) -> dict:
    """The findings of a capture of run() (live tensors, owners searched live, analysed at its end)."""
    capture = Capture(tmp_path / "units.vscope", summary=False, live_warnings=False,
                      source=Source.live_tensors, **kw).start()
    try:
        run()
    finally:
        capture.stop()
    assert capture.findings is not None, capture.off_reason
    return capture.findings


def test_an_evaluation_inside_training_that_gathers_its_logits_leaks_per_eval_batch(tmp_path):
    """HF's Trainer without eval_accumulation_steps, evaluating every 2 steps: all_preds grows by
    each eval batch's logits (torch_pad_and_concatenate) until the evaluation ends. The optimizer
    owns the steps, so the eval batches are units inside them, and the owner is the loop's local."""
    vocab, tokens, batch, batches = 256, 8, 2, 16
    trainer = llama_trainer(tmp_path, keep=None, callbacks=[], vocab=vocab, hidden=32, tokens=tokens, batch=batch,
                            max_steps=6, eval_batches=batches, use_cpu=True, per_device_eval_batch_size=batch,
                            eval_strategy="steps", eval_steps=2)
    trainer.compute_metrics = lambda predictions: {"seen": float(len(predictions.predictions))}  # so logits are gathered
    found = captured_findings(tmp_path, trainer.train)
    assert found["steps"]["unit"] == "optimizer step"
    gathered = [w for w in found["within_step"] if w["unit"] == "eval batch"]
    assert gathered, found["within_step"]
    logits = batch * tokens * vocab * 4  # float32 logits of one eval batch
    top = max(gathered, key=lambda w: w["bytes_per_unit"])
    assert abs(top["bytes_per_unit"] - logits) <= 0.1 * logits, top
    assert top["units_per_step"] == batches
    assert any(frame["function"] == "torch_pad_and_concatenate" for frame in top["stack"]), top["stack"]
    assert any("all_preds" in path["path"] for path in top["owners"]), top["owners"]
    assert found["verdict"] == "leak"


def test_generate_calls_that_each_keep_their_logits_until_the_step_ends_leak_per_call(tmp_path):
    """A chat loop counted by vramscope.step(): each turn's generate() keeps its scores in a list
    cleared at the step's end. The calls are the units inside each step (the first conversation's,
    before the first vramscope.step(), are steps: the strongest source seen then)."""
    model = tiny_llama()
    turns = []

    def chat():
        for _ in range(12):
            for _ in range(10):
                out = model.generate(torch.randint(3, 64, (1, 5)), max_new_tokens=4, min_new_tokens=4,
                                     do_sample=False, output_scores=True, return_dict_in_generate=True)
                turns.append(torch.stack(out.scores).clone())
            turns.clear()
            vramscope.step()

    found = captured_findings(tmp_path, chat)
    assert found["steps"]["unit"] == "vramscope.step()"
    per_call = [w for w in found["within_step"] if w["unit"] == "generate() call"]
    assert len(per_call) == 1, found["within_step"]
    scores = 4 * 64 * 4  # four new tokens' scores over the 64-token vocabulary, float32
    assert abs(per_call[0]["bytes_per_unit"] - scores) <= 0.1 * scores, per_call
    assert per_call[0]["units_per_step"] == 10
    assert any("turns" in path["path"] for path in per_call[0]["owners"]), per_call[0]["owners"]
