"""transformers' Trainer with vramscope's callback, on a CPU: a tiny Llama built from a config (random
weights, nothing downloaded) whose compute_loss keeps each step's logits for metrics that never come.
Given 2 MiB of room, the callback sees the projected OOM near, saves a checkpoint and stops the run;
the report goes to out/vramscope/.

    python train_hf.py
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from vramscope.integrations.hf import VramscopeCallback

VOCAB, TOKENS, BATCH, STEPS = 128, 16, 4, 200


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self):
        return BATCH * STEPS

    def __getitem__(self, i):
        ids = torch.randint(0, VOCAB, (TOKENS,))
        return {"input_ids": ids, "labels": ids}


class MyTrainer(Trainer):
    logits_for_metrics = []

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
        self.logits_for_metrics.append(outputs.logits.detach())  # the leak: kept every step, never read
        return (loss, outputs) if return_outputs else loss


torch.manual_seed(0)
config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=TOKENS)
args = TrainingArguments(output_dir="out", max_steps=STEPS, per_device_train_batch_size=BATCH, use_cpu=True,
                         report_to=[], save_strategy="no", logging_steps=STEPS, disable_tqdm=True)
trainer = MyTrainer(model=LlamaForCausalLM(config), args=args, train_dataset=RandomTokens(),
                    callbacks=[VramscopeCallback(device_memory="2 MiB")])
trainer.train()
