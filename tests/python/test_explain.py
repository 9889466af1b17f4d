"""who_holds() on CPU tensors: each way the seeds' leaks were held, found by its path."""

import contextlib
import functools
import gc
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from vramscope.owners import who_holds  # noqa: E402


def explain_in_fresh_process(code: str) -> list[str]:
    """Runs `code` as a script's __main__ and prints who_holds(TARGET), one path a line."""
    script = textwrap.dedent(code) + textwrap.dedent("""
        import vramscope
        for p in vramscope.who_holds(TARGET_OF()):
            print(p)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_list_of_model_outputs():
    lines = explain_in_fresh_process("""
        import torch
        HISTORY = []
        model = torch.nn.Linear(64, 64)
        for step in range(8):
            HISTORY.append({"logits": model(torch.randn(16, 64))})
        TARGET_OF = lambda: HISTORY[7]["logits"]
    """)
    assert lines[0].startswith("__main__.HISTORY[7]['logits']  → Tensor 4.0 KiB f32 [16, 64] cpu"), lines


def test_a_kept_loss_reaches_a_custom_functions_ctx_attribute():
    lines = explain_in_fresh_process("""
        import torch

        class KeepSiLU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.kept = x.detach() * 2          # the leak: ctx outlives the step with the loss
                return torch.nn.functional.silu(x)

            @staticmethod
            def backward(ctx, g):
                return g

        METRICS = []
        w = torch.randn(64, 64, requires_grad=True)
        for step in range(3):
            loss = KeepSiLU.apply(torch.randn(32, 64) @ w).sum()
            METRICS.append(loss)                   # kept with its graph
        del loss
        TARGET_OF = lambda: METRICS[2].grad_fn.next_functions[0][0].kept
    """)
    assert lines and lines[0].startswith("__main__.METRICS[2].grad_fn.next_functions[0][0].kept  → Tensor 8.0 KiB"), lines


def test_an_output_saved_by_autograd_is_found_through_the_graph():
    """A node hands out a saved output as a new Python object at each access: the path is found by
    the memory it shares with the target, not by identity (the seeds' eval without no_grad)."""
    lines = explain_in_fresh_process("""
        import torch
        w = torch.randn(64, 64, requires_grad=True)
        EVAL_TOTAL = 0.0
        for step in range(3):
            EVAL_TOTAL = EVAL_TOTAL + torch.exp(torch.randn(32, 64) @ w).mean()
        TARGET_OF = lambda: EVAL_TOTAL.grad_fn.next_functions[1][0].next_functions[0][0]._saved_result
    """)
    assert lines and lines[0].startswith(
        "__main__.EVAL_TOTAL.grad_fn.next_functions[1][0].next_functions[0][0]._saved_result  → Tensor 8.0 KiB"), lines


def test_an_output_its_own_node_saved_is_no_cycle_through_autograd():
    """exp() saves its output (without the grad_fn, so no cycle): reaching that saved copy from the
    tensor's own graph must not read as a cycle that is never freed."""
    import time

    from vramscope.owners.paths import _autograd_cycle

    out = torch.exp(torch.randn(32, 64, requires_grad=True))
    assert out.grad_fn._saved_result.data_ptr() == out.data_ptr()
    assert _autograd_cycle([out], time.monotonic() + 5) == []


def test_objects_behind_saved_tensors_hooks():
    lines = explain_in_fresh_process("""
        import torch

        class Offloader:
            def __init__(self):
                self.tracker = {}
            def pack(self, t):
                self.tracker[len(self.tracker)] = t   # stashed, never cleared
                return len(self.tracker) - 1
            def unpack(self, key):
                return self.tracker[key]

        OFFLOAD = Offloader()
        w = torch.randn(32, 32, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(OFFLOAD.pack, OFFLOAD.unpack):
            for _ in range(2):
                (torch.randn(8, 32) @ w).relu().sum().backward()
        TARGET_OF = lambda: OFFLOAD.tracker[3]
    """)
    assert lines and lines[0].startswith("__main__.OFFLOAD.tracker[3]  → Tensor"), lines


def test_a_forward_hook_closure_appending_to_a_list():
    lines = explain_in_fresh_process("""
        import torch

        def attach(model):
            stash = []
            model.register_forward_hook(lambda m, i, o: stash.append(o))
            return model

        MODEL = attach(torch.nn.Linear(16, 16))
        for _ in range(4):
            MODEL(torch.randn(4, 16))
        TARGET_OF = lambda: MODEL._forward_hooks[0].__closure__[0].cell_contents[3]
    """)
    assert lines and lines[0].startswith("__main__.MODEL._forward_hooks[0] <closure 'stash'>[3]  → Tensor"), lines


def test_a_cycle_is_reported_as_freed_only_by_gc():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    a.payload = torch.randn(1000)
    target = a.payload
    del a, b
    paths = who_holds(target)
    assert paths and paths[0].kind == "cycle, freed only by gc"
    assert ".payload" in paths[0].path


def test_a_hook_list_a_root_reaches_is_no_cycle_even_when_a_dead_cycle_holds_it_too():
    """A forward hook appends its outputs under no_grad to a list attribute of the model, which a
    local of the training function holds; a dead cycle (an exception's frame, say) also holds one
    of them. The list reached from the root is the owner; a cycle is named only where no root reaches."""
    script = textwrap.dedent("""
        import gc, torch, vramscope
        gc.disable()  # the dead cycle stays until the search collects it
        def train():
            model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
            model.captured = []
            def keep(module, inputs, out):
                with torch.no_grad():
                    model.captured.append(out.detach().clone())
            model[0].register_forward_hook(keep)
            for _ in range(4):
                model(torch.randn(8, 64)).sum().backward()
            dead = [model.captured[-1]]
            dead.append(dead)  # a cycle no root reaches, holding the newest capture too
            del dead
            report(model.captured[-1])
        def report(tensor):  # the caller's references are not owners: train() is asked from here
            for p in vramscope.who_holds(tensor):
                print(p)
        train()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and lines[0].startswith("train() local 'model'.captured[3]  → Tensor"), lines
    assert not any("cycle" in line for line in lines), lines


def test_a_small_view_pinning_a_large_base():
    lines = explain_in_fresh_process("""
        import torch
        CACHE = {}
        big = torch.randn(1024, 1024)              # 4 MiB
        CACHE["first_row"] = big[0]                # 4 KiB, but it keeps the 4 MiB storage alive
        del big
        TARGET_OF = lambda: CACHE["first_row"]
    """)
    assert lines and lines[0].startswith("__main__.CACHE['first_row']  → Tensor 4.0 KiB f32 [1024] cpu "
                                         "(view of a 4.0 MiB storage)"), lines


def test_an_address_reused_after_a_free_names_its_new_owner_only():
    lines = explain_in_fresh_process("""
        import torch
        OLD, NEW = [], []
        block = bytearray(4096)                    # one block of memory, used twice
        OLD.append(torch.frombuffer(block, dtype=torch.float32))
        address = OLD[0].data_ptr()
        OLD.clear()                                # the old owner lets go
        NEW.append(torch.frombuffer(block, dtype=torch.float32))  # the same address, a new owner
        TARGET_OF = lambda: ("cpu", address + 100)
    """)
    assert lines and lines[0].startswith("__main__.NEW[0]  → Tensor 4.0 KiB"), lines
    assert not any("OLD" in line for line in lines)


def test_a_local_of_a_live_frame_and_the_callers_own_reference_is_not_an_owner():
    def train():
        cache = [torch.randn(100)]
        return inner(cache[0])

    def inner(t):
        return who_holds(t)

    found = train()
    assert [str(p).split("  →")[0] for p in found] == ["train() local 'cache'[0]"]


def test_nothing_holds_a_free_target():
    t = torch.randn(10)
    assert [p.path for p in who_holds(t)] == []
    gc.collect()


def test_explain_without_a_capture_says_what_it_needs():
    import vramscope
    from vramscope.capture import session

    if session.last_capture() is not None and session.last_capture().path is not None:
        pytest.skip("a capture ran in this process")
    with pytest.raises(RuntimeError, match="needs a capture"):
        vramscope.explain()


def test_explain_inside_a_capture_names_who_holds_the_leak_now(tmp_path):
    """vramscope.explain() in the middle of a real capture: the trace so far analysed, its leak's
    blocks mapped to tensors, and their owner found while the run holds them."""
    script = textwrap.dedent("""
        import json, sys, torch, vramscope
        from vramscope.capture.session import Capture, Source
        def main(path):
            kept = []
            with Capture(path, source=Source.live_tensors, summary=False, live_warnings=False,
                         explain=False, optimizer_steps=False):
                for step in range(20):
                    kept.append(torch.empty(65536))
                    vramscope.step()
                found = vramscope.explain(quiet=True)
            print(json.dumps([f["owner_lines"] for f in found]))
        main(sys.argv[1])
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "explain.vscope")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (owners,) = json.loads(proc.stdout.splitlines()[-1])
    assert any("main() local 'kept'" in line for line in owners), owners


def test_an_eval_without_no_grad_is_held_by_its_running_total_found_while_the_run_goes_on(tmp_path):
    """The seeds' eval without torch.no_grad(), captured from live tensors: both sites (the eval input
    and the activations its graph saved) are named at the step the leak is confirmed, inside the
    optimizer's step, after gc has freed the graph's earlier Python wrappers."""
    script = textwrap.dedent("""
        import sys, torch
        from vramscope.capture.session import Capture, Source
        def main(path):
            model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
            opt = torch.optim.AdamW(model.parameters())
            with Capture(path, source=Source.live_tensors, summary=False) as capture:
                eval_total = 0.0
                for step in range(20):
                    model(torch.randn(64, 256)).pow(2).mean().backward()
                    opt.step()
                    opt.zero_grad()
                    x_eval = torch.randn(64, 256)
                    eval_total = eval_total + model(x_eval).pow(2).mean()
                    del x_eval
            for found in capture.live_owners:
                print(found["site"]["line"], found["found_at_step"], (found["owner_lines"] or [found["note"]])[0])
        main(sys.argv[1])
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "eval.vscope")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout + proc.stderr
    for line in lines:
        assert " main() local 'eval_total'.grad_fn." in line and "._saved_" in line, lines


OWNED_LEAKS = textwrap.dedent("""
    import json, sys, torch, vramscope
    from vramscope.capture import session
    from vramscope.capture.session import Capture, Source
    session.END_SEARCHES = float(sys.argv[2])
    SIZES = {"tiny": 4096, "small": 16384, "medium": 65536, "large": 262144, "huge": 1048576}
    def main(path):
        # Listed smallest first, so the monitor confirms the small ones no later than the large.
        tiny, small, medium, large, huge = [], [], [], [], []
        with Capture(path, source=Source.live_tensors, summary=False, live_warnings=False,
                     optimizer_steps=False) as capture:
            for step in range(24):  # a line each: a site each
                tiny.append(torch.empty(SIZES["tiny"] // 4))
                small.append(torch.empty(SIZES["small"] // 4))
                medium.append(torch.empty(SIZES["medium"] // 4))
                large.append(torch.empty(SIZES["large"] // 4))
                huge.append(torch.empty(SIZES["huge"] // 4))
                vramscope.step()
        for found in capture.owners:
            print(json.dumps({"rate": found["bytes_per_step"], "at_step": found["found_at_step"],
                              "owner": (found["owner_lines"] or [found["note"]])[0]}))
    main(sys.argv[1])
""")


@pytest.mark.parametrize("end_searches", [3, 0])
def test_every_leak_has_its_owner_largest_first_found_at_the_end_or_else_live(tmp_path, end_searches):
    """Five leaks of different sizes: every one is explained, largest first (not only the first three
    of the monitor's list). With no budget left at the end, each shows the answer found live."""
    proc = subprocess.run([sys.executable, "-c", OWNED_LEAKS, str(tmp_path / "owned.vscope"), str(end_searches)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [f["owner"].split("'")[1] for f in found] == ["huge", "large", "medium", "small", "tiny"], found
    assert [f["rate"] for f in found] == sorted((f["rate"] for f in found), reverse=True)
    for f in found:
        assert f["owner"].startswith(f"main() local '{f['owner'].split(chr(39))[1]}'["), f
        assert (f["at_step"] is None) == (end_searches > 0), f  # found at the end, or at its live step


def test_a_plain_tensor_attribute_of_a_module_is_named_as_an_attribute():
    """A metric module keeps its state as a plain tensor attribute (not a buffer): the path names
    `.scores`, not `<referent>['scores']` (the module's edges were lost when a tensor's truth was asked)."""
    lines = explain_in_fresh_process("""
        import torch
        class Metric(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scores = torch.empty(0, 8)
                self.count = torch.zeros(())
        METRIC = Metric()
        METRIC.scores = torch.cat([METRIC.scores.clone(), torch.randn(4, 8)])
        TARGET_OF = lambda: METRIC.scores
    """)
    assert lines and lines[0].startswith("__main__.METRIC.scores  → Tensor"), lines


def test_a_cycle_left_when_the_training_function_returned_yields_to_the_owner_found_live(tmp_path):
    """A forward hook's closure holds the model that holds the hook: once train() returns, the list
    of captures sits in that cycle. The search at the end finds only the cycle; what kept the memory
    while the run went on was train()'s local, found live: that is the answer shown."""
    script = textwrap.dedent("""
        import gc, json, sys, torch, vramscope
        from vramscope.capture.session import Capture, Source
        gc.disable()  # the cycle train() leaves stays until the search at the end looks
        def train():
            model = torch.nn.Sequential(torch.nn.Linear(256, 256))
            model.captured = []
            def keep(module, inputs, out):
                with torch.no_grad():
                    model.captured.append(out.detach().clone())
            model[0].register_forward_hook(keep)
            for step in range(16):
                model(torch.randn(64, 256))
                vramscope.step()
        with Capture(sys.argv[1], source=Source.live_tensors, summary=False, live_warnings=False,
                     optimizer_steps=False) as capture:
            train()
        for found in capture.owners:
            print(json.dumps({"at_step": found["found_at_step"], "owner": found["owner_lines"][0]}))
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "hook.vscope")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(found) == 1, proc.stdout + proc.stderr
    assert found[0]["owner"].startswith("train() local 'model'.captured["), found
    assert found[0]["at_step"] is not None, found


# -- memory outside torch's allocator: each kind's targets (owners/targets.py) ----------------

def owners_of_leak_in_fresh_process(code: str) -> dict:
    """Runs `code` as a script's __main__, then asks for the owners of LEAK (a finding's memory,
    library, device and blocks) as the capture would: prints {"owners": [...], "note": ...}."""
    script = textwrap.dedent(code) + textwrap.dedent("""
        import json, sys
        from vramscope.owners.leaks import owners_of_blocks
        owners, note = owners_of_blocks(LEAK, LEAK["live_blocks"])
        print(json.dumps({"owners": [str(o) for o in owners], "note": note, "modules": sorted(sys.modules)}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_groups_memory_is_held_by_torch_distributeds_registry_a_real_root():
    """A process group made every step and never destroyed: the registry holds them all. Real gloo
    groups on CPU (the rule takes the backend; NCCL's groups are held the same way), and the path
    is followed from the module's own dict to the newest group."""
    found = owners_of_leak_in_fresh_process("""
        import sys, torch, torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        for step in range(5):
            group = dist.new_group([0])
            dist.all_reduce(torch.ones(4), group=group)
        from vramscope.owners.targets import process_groups
        (path,) = process_groups("gloo").known
        module, name = path.root.rsplit(".", 1)
        registry = vars(sys.modules[module])[name]
        assert registry is dist.distributed_c10d._world.pg_map and path.edges == ["<dict key>"]
        assert list(registry)[-1] is group
        print(path)
        LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                "memory": "external", "library": "NCCL", "live_blocks": [(4096, 1024)]}
    """)
    # Gloo's groups only: no NCCL group is alive, which the answer says.
    assert found["owners"] == [] and found["note"].startswith("no nccl process group is alive"), found


def test_the_registry_path_reads_like_the_others():
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        for step in range(3):
            dist.all_reduce(torch.ones(4), group=dist.new_group([0]))
        from vramscope.owners.targets import process_groups
        print(process_groups("gloo").known[0])
    """)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("torch.distributed.distributed_c10d._pg_map <dict key>  → ProcessGroup '3' "
                                   "(gloo, 1 rank); torch.distributed's group registry (_world.pg_map) holds 4 gloo "
                                   "groups"), proc.stdout


def test_an_extensions_own_allocations_are_said_plainly():
    from vramscope.owners.leaks import explained, owners_of_blocks, render_owners

    leak = {"site": {"file": "/x/train.py", "line": 42, "function": "step"}, "device": 0, "bytes_per_step": 2.0 * 2**20,
            "memory": "external", "library": "leaky_ext.so"}
    owners, note = owners_of_blocks(leak, [(1 << 40, 2 << 20)])
    assert owners == [] and note == "held by leaky_ext.so's own allocations: no Python object maps to them"
    assert render_owners([explained(leak, owners, note)]) == (
        "Who holds it\n"
        "  train.py:42 step  (+2.0 MiB/step of external memory from leaky_ext.so)\n"
        "    held by leaky_ext.so's own allocations: no Python object maps to them\n")


def test_a_library_the_run_never_imported_is_never_imported_by_the_search():
    found = owners_of_leak_in_fresh_process("""
        LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                "memory": "external", "library": "CuPy", "live_blocks": [(4096, 1024)]}
    """)
    assert found["note"] == "CuPy is not imported in this process, so its arrays cannot be looked at", found
    assert "cupy" not in found["modules"] and "jax" not in found["modules"]


class _FakeCupyArray:
    """What the CuPy rule reads of an array (.data.ptr, .nbytes, .dtype, .shape, .device.id): the
    real one is checked on the GPU (test_device_owners_gpu below)."""

    def __init__(self, ptr, nbytes):
        self.data = types.SimpleNamespace(ptr=ptr)
        self.nbytes, self.dtype, self.shape = nbytes, "float32", (nbytes // 4,)
        self.device = types.SimpleNamespace(id=0)


def test_cupy_arrays_inside_the_pools_blocks_are_found_by_address(monkeypatch):
    from vramscope.owners.leaks import owners_of_blocks

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=_FakeCupyArray))
    block = (1 << 40, 4 << 20)
    kept = [_FakeCupyArray(block[0] + 512, 1 << 20)]  # an array inside the block CuPy's pool took
    elsewhere = _FakeCupyArray(2 << 40, 1 << 20)  # noqa: F841  (alive, but in no block of the leak)
    owners, note = owners_of_blocks({"device": 0, "memory": "external", "library": "CuPy"}, [block])
    assert [str(o) for o in owners] == [
        "test_cupy_arrays_inside_the_pools_blocks_are_found_by_address() local 'kept'[0]  → "
        "cupy.ndarray 1.0 MiB float32 [262144] cuda:0"], note


def test_torchs_memory_and_a_librarys_at_one_line_are_two_answers():
    from vramscope.owners.leaks import explained, same_site

    site = {"file": "t.py", "line": 3, "function": "f"}
    torch_leak = {"site": site, "device": 0, "bytes_per_step": 1.0}  # no memory: a finding from before
    external = {**torch_leak, "memory": "external", "library": "CuPy"}
    assert explained(torch_leak, [], "")["memory"] == "torch"
    assert not same_site(explained(torch_leak, [], ""), explained(external, [], ""))
    assert same_site(explained(external, [], ""), {**external, "bytes_per_step": 7.0})


def test_the_live_line_says_a_librarys_allocations_plainly(capsys):
    from vramscope.capture.reporter import LiveReporter

    said = LiveReporter(device_type="cuda", live_warnings=True, explain=True, explain_budget=1.0)
    live = {"site": {"file": "t.py", "line": 3, "function": "f"}, "device": 0, "bytes_per_step": 2.0 * 2**20,
            "memory": "external", "library": "leaky_ext.so", "blocks": [(1 << 40, 2 << 20)]}
    said.explain_live([live], 9, contextlib.nullcontext)
    assert said.live_owners[0]["library"] == "leaky_ext.so"
    said_line = "vramscope:   held by leaky_ext.so's own allocations: no Python object maps to them"
    assert said_line in capsys.readouterr().err


@pytest.mark.gpu
def test_device_owners_gpu():
    """On the GPU: pinned tensors, and CuPy's and JAX's arrays where installed, each found from the
    block its library took; an NCCL group held by the registry."""
    found = owners_of_leak_in_fresh_process("""
        import os, torch
        torch.cuda.init()
        PINNED = [torch.empty(1 << 20, pin_memory=True) for _ in range(3)]
        s = PINNED[2].untyped_storage()
        LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                "memory": "pinned", "library": "torch", "live_blocks": [(s.data_ptr(), s.nbytes())]}
    """)
    assert found["owners"] and found["owners"][0].startswith("__main__.PINNED[2]  → Tensor 4.0 MiB f32 [1048576] "
                                                             "cpu pinned"), found
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        found = owners_of_leak_in_fresh_process("""
            import cupy
            KEPT = [cupy.empty(1 << 20, dtype=cupy.float32) for _ in range(3)]
            LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                    "memory": "external", "library": "CuPy", "live_blocks": [(KEPT[1].data.mem.ptr, 4 << 20)]}
        """)
        assert found["owners"] and found["owners"][0].startswith("__main__.KEPT[1]  → cupy.ndarray 4.0 MiB"), found
    try:
        import jax  # noqa: F401
    except ImportError:
        pass
    else:
        found = owners_of_leak_in_fresh_process("""
            import os
            os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            import jax, jax.numpy as jnp
            KEPT = [jnp.ones((1 << 20,), jnp.float32) for _ in range(3)]
            LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                    "memory": "external", "library": "JAX/XLA",
                    "live_blocks": [(KEPT[1].unsafe_buffer_pointer(), 4 << 20)]}
        """)
        assert found["owners"] and found["owners"][0].startswith("__main__.KEPT[1]  → jax.Array 4.0 MiB"), found
    found = owners_of_leak_in_fresh_process("""
        import torch, torch.distributed as dist
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        for step in range(3):
            group = dist.new_group([0])
            dist.all_reduce(torch.ones(4, device="cuda"), group=group)
        LEAK = {"site": {"file": "t.py", "line": 1, "function": "f"}, "device": 0, "bytes_per_step": 1.0,
                "memory": "external", "library": "NCCL", "live_blocks": []}
    """)
    assert found["owners"] == ["torch.distributed.distributed_c10d._pg_map <dict key>  → ProcessGroup '3' (nccl, "
                               "1 rank); torch.distributed's group registry (_world.pg_map) holds 4 nccl groups"], found


def test_a_state_grown_by_replacement_is_held_by_its_attribute_though_the_word_comes_a_step_late(tmp_path):
    """A metric that concatenates each batch onto a copy of its state (torchmetrics' pattern, the
    GPU fixture leak_metric_reclone): the block the monitor names at the step it confirms is freed by
    the next step, when its word reaches the training thread. The search must use the site's blocks
    as they are then, or it finds nothing (or an unrelated tensor at the reused address)."""
    script = textwrap.dedent("""
        import sys, torch
        from vramscope.capture.session import Capture, Source
        class Metric(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scores = torch.empty(0, 512)
            def forward(self, logits):
                history = self.scores.clone()
                self.scores = torch.cat([history, logits.detach()[:, :512].sigmoid()])
                return self.scores.mean()
        def main(path):
            model = torch.nn.Linear(1024, 1024)
            opt = torch.optim.AdamW(model.parameters())
            metric = Metric()
            with Capture(path, source=Source.live_tensors, summary=False, live_warnings=False) as capture:
                for step in range(30):
                    out = model(torch.randn(256, 1024))
                    out.pow(2).mean().backward()
                    opt.step()
                    opt.zero_grad()
                    metric(out)
                    del out
            for found in capture.live_owners:
                print((found["owner_lines"] or [found["note"]])[0])
        main(sys.argv[1])
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "reclone.vscope")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() and all(line.startswith("main() local 'metric'.scores ")
                                            for line in proc.stdout.splitlines()), proc.stdout + proc.stderr


def _holds_from_a_callee(target):
    return [p.path for p in who_holds(target)]


def _raise_with(h):
    raise ValueError("bad batch")


def test_a_caught_exception_that_keeps_its_frames_is_named_hop_by_hop():
    """A list of caught exceptions keeps each traceback's frames, and their locals: every hop by name."""
    failures = []
    for i in range(3):
        h = torch.empty(1000 + i)
        try:
            _raise_with(h)
        except ValueError as e:
            failures.append(e)
    del h
    paths = _holds_from_a_callee(failures[0].__traceback__.tb_next.tb_frame.f_locals["h"])
    assert paths == ["test_a_caught_exception_that_keeps_its_frames_is_named_hop_by_hop() local "
                     "'failures'[0].__traceback__.tb_next.tb_frame.f_locals['h']"], paths


@pytest.mark.parametrize("maxsize", [None, 4])
def test_an_lru_caches_results_are_named_by_their_key(maxsize):
    @functools.lru_cache(maxsize=maxsize)
    def mask_fn(n):
        return torch.ones(n)

    paths = _holds_from_a_callee(mask_fn(77))
    assert paths == ["test_an_lru_caches_results_are_named_by_their_key() local 'mask_fn' <lru_cache of mask_fn>[77]"], paths


HF_EVAL = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, sys.argv[2])
    from tiny_trainers import llama_trainer
    from vramscope.capture.session import Capture, Source
    def main(path):
        trainer = llama_trainer(path + ".out", keep=None, callbacks=[], vocab=512, hidden=32, tokens=16, batch=2,
                                max_steps=24, use_cpu=True, per_device_eval_batch_size=2)
        trainer.compute_metrics = lambda p: {"n": float(len(p.predictions))}
        with Capture(path, source=Source.live_tensors, summary=False, live_warnings=False) as capture:
            trainer.evaluate(trainer.train_dataset)
        (leak,) = capture.findings["leaks"]
        print(json.dumps({"leak": leak, "owners": [o["owner_lines"] for o in capture.owners]}))
    main(sys.argv[1])
""")


def test_an_evaluation_that_gathers_every_prediction_names_transformers_buffer_and_its_holder(tmp_path):
    """HF Trainer.evaluate() without eval_accumulation_steps, under one line of the user's code: the
    buffer transformers concatenates the predictions into is replaced by a bigger one each batch.
    The leak shows that buffer's stack, names torch_pad_and_concatenate as what allocates it, and
    finds evaluation_loop's local `all_preds` holding it, not the batch in hand under the same line."""
    pytest.importorskip("transformers")
    proc = subprocess.run([sys.executable, "-c", HF_EVAL, str(tmp_path / "eval.vscope"), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    leak = found["leak"]
    assert leak["evidence"] == "replaced-bigger"
    logits_per_batch = 2 * 16 * 512 * 4
    assert abs(leak["bytes_per_step"] - logits_per_batch) <= 0.1 * logits_per_batch, leak["bytes_per_step"]
    assert leak["stack"][leak["stack_shown_from"]]["function"] == "torch_pad_and_concatenate"
    assert leak["allocated_in"]["file"].endswith("transformers/trainer_pt_utils.py")
    assert any("evaluation_loop() local 'all_preds'" in line for lines in found["owners"] for line in lines), found["owners"]


def test_a_search_keeps_nothing_a_running_frames_locals_held_once_they_let_go():
    """Before Python 3.13 a frame's f_locals is a snapshot the frame keeps: a search that read it
    kept every tensor the loop's locals held then, for as long as the loop ran (a cache's old keys,
    seen on the GPU as 2.4 MiB more at the step the owner search ran). The search reads the frame's
    own slots instead."""
    import weakref

    class Layer:
        pass

    layer = Layer()
    layer.keys = torch.randn(1024, 256)
    old_keys = layer.keys
    gone = weakref.ref(old_keys)
    assert any("local 'old_keys'" in p for p in _holds_from_a_callee(old_keys))
    del old_keys
    layer.keys = torch.randn(1024, 256)  # the cache replaced it; nothing the loop has holds the old one
    assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]



def test_a_search_leaves_none_of_its_frames_alive():
    """The walk up each thread starts at this thread's top frame, the search's own: a name still
    holding it when the search returned kept that frame, the frames below it and their locals (the
    tensors the search looked at) alive in a cycle until gc ran, three steps later on the GPU, where a
    buffer replaced by a bigger one then seemed to stop growing."""
    import weakref

    from vramscope.owners.leaks import owners_of_blocks

    package = str(Path(who_holds.__code__.co_filename).parents[1])
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        kept = torch.randn(1024, 256)
        gone = weakref.ref(kept)
        found, _ = owners_of_blocks({"device": 0, "site": {}}, [(kept.data_ptr(), kept.nbytes)], device_type="cpu")
        assert found and "local 'kept'" in found[0].path
        del found, kept
        assert gone() is None
        frames = [o.f_code.co_name for o in gc.get_objects()
                  if isinstance(o, types.FrameType) and o.f_code.co_filename.startswith(package)]
        assert frames == []
    finally:
        if enabled:
            gc.enable()

WITHIN_STEP = textwrap.dedent("""
    import json, sys, torch
    from vramscope.capture.session import Capture, Source

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.kept = torch.empty(64 * 1024)  # what each microbatch's loss keeps until the step ends
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def main(path):
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        with Capture(path, source=Source.live_tensors, summary=False) as capture:
            for step in range(2):
                losses = []
                for m in range(16):
                    loss = Scale.apply(model(torch.randn(8, 64))).square().mean() / 16
                    loss.backward()
                    losses.append(loss)  # kept with its grad_fn, and its ctx
                opt.step()
                opt.zero_grad(set_to_none=True)
                del losses
        (leak,) = capture.findings["within_step"]
        print(json.dumps(leak))
    main(sys.argv[1])
""")


def test_a_leak_inside_a_step_is_held_by_what_each_unit_kept_found_at_its_highest_point(tmp_path):
    """Seed 002's pattern: each microbatch's loss keeps its custom Function's ctx until the optimizer
    step is done. Nothing is left at a step end to search; as the optimizer step begins, the
    microbatches done and each one's part still held, the live search names the losses' list and
    the ctx attribute."""
    proc = subprocess.run([sys.executable, "-c", WITHIN_STEP, str(tmp_path / "within.vscope")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    leak = json.loads(proc.stdout.splitlines()[-1])
    assert abs(leak["bytes_per_unit"] - 256 * 1024) <= 0.1 * 256 * 1024, leak["bytes_per_unit"]
    paths = [o["path"] for o in leak.get("owners", [])]
    assert paths and paths[0].startswith("main() local 'losses'[") and paths[0].endswith(".kept"), paths
    assert leak["owners_found_at_step"] == 0
    # Said as it is found, once for its site over both steps.
    said = [line for line in proc.stderr.splitlines() if "leak inside the step" in line]
    assert len(said) == 1 and said[0].startswith("vramscope: leak inside the step: +256.0 KiB per microbatch at "), said
    assert "(cpu live tensors, step 0), held until the step ends" in said[0], said


def test_a_tensor_keying_a_dict_is_named_by_its_type_and_shape_not_its_repr():
    """An optimizer rebuilt every round with its schedulers kept: the state is keyed by parameters,
    and a path through it names the key `<Parameter [64, 64]>`, not the parameter's printout."""
    model = torch.nn.Linear(64, 64)
    schedulers = []
    for _ in range(2):
        opt = torch.optim.Adam(model.parameters())
        schedulers.append(torch.optim.lr_scheduler.StepLR(opt, step_size=10))
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
    paths = _holds_from_a_callee(schedulers[0].optimizer.state[model.weight]["exp_avg"])
    assert any(p.endswith(".optimizer.state[<Parameter [64, 64]>]['exp_avg']") for p in paths), paths
    assert all("\n" not in p and len(p) < 300 for p in paths), paths
