"""Steps a second of a tiny Llama's training on CPU, with and without live-tensor capture."""
import time, torch, vramscope
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
torch.set_num_threads(1)
cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)
model = LlamaForCausalLM(cfg); opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 1024, (4, 128))
def step():
    model(input_ids=ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()
def rate(n=30):
    for _ in range(3): step()
    t = time.perf_counter()
    for _ in range(n): step()
    return n / (time.perf_counter() - t)
plain = rate()
with vramscope.Capture("/tmp/bench_lt.vscope", source=vramscope.capture.Source.live_tensors, summary=False, live_warnings=False):
    captured = rate()
plain2 = rate()
print(f"plain {plain:.1f} steps/s, plain again {plain2:.1f}, live tensors {captured:.1f} steps/s: {(plain+plain2)/2/captured:.2f}x slower")
