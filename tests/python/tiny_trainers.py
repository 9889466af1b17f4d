"""A transformers Trainer over a tiny Llama built from a config (no weights, no network), whose
compute_loss may keep something of each step: the leak the callback tests plant."""

import pytest

torch = pytest.importorskip("torch")


def llama_trainer(output_dir, *, keep, callbacks, vocab: int, hidden: int, tokens: int, batch: int, max_steps: int,
                  eval_batches: int = 0, **training_args):
    """keep(logits) -> what the step keeps for good (None: a clean run); eval_batches: an evaluation
    dataset of that many batches."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer's own requirement
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=tokens)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, batches: int):
            self.batches = batches

        def __len__(self):
            return batch * self.batches

        def __getitem__(self, i):
            ids = torch.randint(0, vocab, (tokens,))
            return {"input_ids": ids, "labels": ids}

    class KeepsSomething(transformers.Trainer):
        kept = []

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            loss, outputs = super().compute_loss(model, inputs, True, **kwargs)
            if keep is not None:
                self.kept.append(keep(outputs.logits.detach()))
            return (loss, outputs) if return_outputs else loss

    args = transformers.TrainingArguments(output_dir=str(output_dir), max_steps=max_steps,
                                          per_device_train_batch_size=batch, report_to=[], save_strategy="no",
                                          logging_steps=1000, disable_tqdm=True, **training_args)
    return KeepsSomething(model=transformers.LlamaForCausalLM(config), args=args, train_dataset=Tokens(max_steps),
                          eval_dataset=Tokens(eval_batches) if eval_batches else None, callbacks=callbacks)


def lightning_module(*, width: int, hidden: int, keep, on_rank: int | None = None):
    """A two-layer Lightning module whose training_step keeps keep(output) (None: a clean run), on
    every rank or only on `on_rank`: Lightning's own training_step_outputs pattern, kept for an epoch
    end that never comes."""
    pl = pytest.importorskip("lightning.pytorch")

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))
            self.training_step_outputs = []

        def training_step(self, batch, batch_idx):
            out = self.net(batch)
            if keep is not None and on_rank in (None, self.global_rank):
                self.training_step_outputs.append(keep(out.detach()))
            return out.pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    return pl, Module()
