"""On a CUDA machine: record a leaking loop with torch's own recorder, then analyse it."""

import inspect

import pytest


@pytest.mark.gpu
def test_a_fresh_snapshot_of_a_leaking_loop_is_diagnosed(tmp_path):
    import torch

    import vramscope

    model = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        for _ in range(20):
            x = torch.randn(64, 256, device="cuda")
            kept.append(torch.empty(256 * 1024, device="cuda"))  # 1 MiB a step, never released
            leak_line = inspect.currentframe().f_lineno - 1
            model(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        path = tmp_path / "snap.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    findings = vramscope.analyze(path)
    assert findings["verdict"] == "leak"
    top = findings["leaks"][0]
    assert top["site"]["line"] == leak_line
    assert abs(top["bytes_per_step"] - 2**20) < 0.1 * 2**20
