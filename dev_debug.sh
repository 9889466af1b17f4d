set -x
python3 -m pip install --no-build-isolation --no-deps . -q 2>&1 | tail -3
cd /tmp && cat > train.py <<'P'
import torch
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for step in range(40):
    loss = model(torch.randn(32, 1024, device="cuda")).pow(2).mean()
    loss.backward()
    opt.step(); opt.zero_grad()
    history.append(torch.empty(1 << 18, device="cuda"))
P
PYTHONFAULTHANDLER=1 timeout 120 python3 -m vramscope run -o /tmp/r.vscope -- python3 train.py 2>&1 | tail -30
cd -
for s in leak_ctx_losses leak_offload_stream; do
  timeout 200 python3 tests/data/record_fixtures.py --scenario $s --live /tmp/$s.vscope 2>&1 | grep -v "^  \[" | tail -8
  python3 -m vramscope analyze /tmp/$s.vscope | head -30
  python3 -c "import json;d=json.load(open('tests/data/$s.truth.json'));print(d['expected'], d['measured_slope_bytes_per_step_from_step1'])"
done
