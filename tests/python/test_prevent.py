"""Preventing leaks: the pytest plugin run by pytester on leaking and clean test files, assert_no_leak,
and sizes. Each pytester run is a subprocess: torch registers its operator libraries once a process.
Without CUDA the markers judge live tensors; with it, the allocator's events: the test
files put their tensors on the GPU when there is one, so the same tests check both modes.

Each seed pattern that reproduces on CPU is locked by a test file with its bug and its fix toggled:
the marker fails before the fix, at the line that leaks, and passes after it.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import vramscope
from vramscope import _core
from vramscope.prevent import parse_size
from vramscope.prevent.check import LeakCheck

pytest_plugins = ["pytester"]
torch = pytest.importorskip("torch")
cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
MODE = "CUDA allocator events" if torch.cuda.is_available() else "live tensors"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# pytester gives each run a HOME of its own: the allocator hook, built once per torch under the real
# HOME's cache, is found through this instead of being built again for every run.
HOOK_CACHE = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()


@pytest.fixture(autouse=True)
def shared_hook_cache(monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", HOOK_CACHE)


HEADER = """\
import gc
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FIXED = {fixed}
"""

# Fast-LLM PR 486 (seeds/002): losses kept with their grad_fn keep a custom Function's ctx.kept alive.
FAST_LLM_CTX_LOSSES = """
class KeepSiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.kept = x.detach() * 2  # LEAK
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s * (1 + x * (1 - s)))

model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)).to(DEVICE)
opt = torch.optim.AdamW(model.parameters())
losses = []

@pytest.mark.limit_gpu_leaks("4 KiB")
def test_training_keeps_only_loss_values(vram_steps):
    for _ in vram_steps(12):
        h = KeepSiLU.apply(model[0](torch.randn(32, 64, device=DEVICE)))
        loss = model[1](h).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item() if FIXED else loss)  # the fix: a number, not the graph
"""

# TRL PR 5700 (seeds/000): an activation offloader stashes each saved tensor and never clears the stash.
TRL_OFFLOAD_STASH = """
class OffloadActivations:
    def __init__(self):
        self.stash = {}

    def pack(self, t):
        self.stash[len(self.stash)] = t.detach().clone()  # LEAK
        return len(self.stash) - 1

    def unpack(self, key):
        return self.stash[key]

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.hooks.__enter__()

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        if FIXED:
            self.stash.clear()  # the fix: release the stash when the step is done

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
offload = OffloadActivations()

@pytest.mark.limit_gpu_leaks("4 KiB")
def test_offloaded_step():
    with offload:
        loss = model(torch.randn(32, 64, device=DEVICE)).pow(2).mean()
        loss.backward()
    opt.step()
    opt.zero_grad()
"""

# TransformerEngine issue 1935 (seeds/004): backward puts the saved tensors back on ctx.tensor_objects and
# never clears them; the saved output's grad_fn is the node that holds ctx: a cycle through the autograd
# graph, freed only when gc happens to collect it (a long run's GPU fills first, so gc is off here).
TE_CTX_TENSOR_OBJECTS = """
class FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        out = q * torch.sigmoid(k)  # LEAK
        ctx.save_for_backward(q, k, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        ctx.tensor_objects = ctx.saved_tensors  # restore_from_saved
        q, k, out = ctx.tensor_objects
        if FIXED:
            ctx.tensor_objects = None  # the fix
        s = torch.sigmoid(k)
        return grad * s, grad * q * s * (1 - s)

weight = torch.nn.Parameter(torch.randn(64, 64, device=DEVICE))
opt = torch.optim.SGD([weight], lr=0.01)

@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    yield
    gc.enable()

@pytest.mark.limit_gpu_leaks("4 KiB")
def test_attention_step(no_gc):
    q = torch.randn(128, 64, device=DEVICE) @ weight
    FusedAttention.apply(q, torch.randn(128, 64, device=DEVICE)).sum().backward()
    opt.step()
    opt.zero_grad()
"""

SEEDS = {"fast_llm_ctx_losses": FAST_LLM_CTX_LOSSES, "trl_offload_stash": TRL_OFFLOAD_STASH,
         "te_ctx_tensor_objects": TE_CTX_TENSOR_OBJECTS}


def seed_file(pytester, name: str, fixed: bool) -> tuple[str, int]:
    """The seed's test file, with its bug or its fix: (module name, the line that leaks)."""
    source = HEADER.format(fixed=fixed) + SEEDS[name]
    module = f"test_{name}_{'fixed' if fixed else 'bug'}"
    pytester.makepyfile(**{module: source})
    return module, next(i for i, line in enumerate(source.splitlines(), 1) if "# LEAK" in line)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_a_seed_leak_fails_its_marker_at_the_leaking_line_before_the_fix_and_passes_after(pytester, name):
    bug, leak_line = seed_file(pytester, name, fixed=False)
    fixed, _ = seed_file(pytester, name, fixed=True)
    result = pytester.runpytest_subprocess("--vramscope", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    # TE's cycle keeps all three tensors of the step, q and k beside the marked output, at one rate.
    assert f"/step at {bug}.py:{leak_line} " in result.stdout.str()
    result.stdout.fnmatch_lines([f"*LeakError: leak: +*/step at {bug}.py:*, over the limit of "
                                 f"4.0 KiB/step (judged from {MODE}*",
                                 "*Captured vramscope call*",
                                 "*held by *",
                                 "*= vramscope =*"])
    result.stdout.fnmatch_lines([f"FAIL {bug}.py::*: leak: +*"])
    result.stdout.fnmatch_lines([f"ok   {fixed}.py::*: * (judged from {MODE}*"])


def test_markers_do_nothing_without_the_plugin_and_the_ini_option_turns_it_on(pytester):
    seed_file(pytester, "fast_llm_ctx_losses", fixed=False)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nvramscope = true\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(failed=1)


def test_a_peak_over_its_limit_fails_a_bad_size_is_a_clear_error_and_too_few_steps_cannot_pass(pytester):
    pytester.makepyfile(test_limits=textwrap.dedent("""
        import pytest
        import torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

        @pytest.mark.limit_gpu_memory("1 MiB")
        def test_peak():
            big = torch.empty(1024, 1024, device=DEVICE)  # 4 MiB

        @pytest.mark.limit_gpu_memory("8 MiB")
        def test_peak_within():
            big = torch.empty(1024, 1024, device=DEVICE)

        @pytest.mark.limit_gpu_leaks("1 MB a step")
        def test_bad_size():
            pass

        @pytest.mark.limit_gpu_leaks("1 MiB", steps=3)
        def test_too_short():
            torch.ones(8, device=DEVICE) * 2

        class Big(torch.nn.Module):
            def forward(self, x):
                return torch.empty(1024, 1024, device=DEVICE) + x

        @pytest.mark.limit_gpu_memory("1 MiB")
        def test_peak_in_a_module():
            out = Big()(torch.ones(1, device=DEVICE))
    """))
    result = pytester.runpytest_subprocess("--vramscope", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=4, passed=1)
    result.stdout.fnmatch_lines(["*PeakError: peak allocated 8.0 MiB*", "*, in Big: *", "*by module: Big 8.0 MiB*"])
    result.stdout.fnmatch_lines(["*PeakError: peak allocated 4.0 MiB is over the limit of 1.0 MiB (judged from*",
                                 "*at step 0, setup: temporaries 4.0 MiB*",
                                 "*4.0 MiB temporaries at test_limits.py:8 test_peak*"])
    result.stdout.fnmatch_lines(["*limit_gpu_leaks 1 MB a step: unknown unit MB a step (use B, KiB, MiB, GiB, TiB, KB,*",
                                 "*CannotJudgeError: vramscope cannot judge this*"])


def kept_forever(store: list):
    store.append(torch.ones(256, 256, device=DEVICE) * 3)  # 256 KiB a call


def test_assert_no_leak_raises_the_finding_and_passes_when_fixed():
    store = []
    with pytest.raises(vramscope.LeakError, match=r"leak: \+256\.0 KiB/step at test_prevent\.py:\d+ kept_forever"):
        vramscope.assert_no_leak(lambda: kept_forever(store), limit="16 KiB")
    vramscope.assert_no_leak(lambda: kept_forever([]), limit="16 KiB")


def test_assert_no_leak_as_a_context_manager_under_its_limit_and_over_it():
    store = []
    with vramscope.assert_no_leak(limit="1 MiB") as check:  # 256 KiB a step is within 1 MiB
        for _ in range(12):
            kept_forever(store)
            check.step()
    assert [leak["bytes_per_step"] for leak in check.judged.findings["leaks"]] == [256 * 1024]
    with pytest.raises(vramscope.LeakError):
        with vramscope.assert_no_leak(limit="128 KiB") as check:
            for _ in range(12):
                kept_forever(store)
                check.step()


@pytest.mark.parametrize("text, size", [("24 MB", 24_000_000), ("1 MiB", 1 << 20), ("512KiB", 512 << 10),
                                        ("+1.5 GiB", 3 << 29), ("100 b", 100), (" 2 kb ", 2000), (4096, 4096)])
def test_sizes_are_written_as_pytest_memray_writes_them(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, says", [("", "limit takes a size from 0 B"), ("MiB", "limit takes a size"),
                                        ("1 MiB/step", "limit 1 MiB/step: unknown unit MiB/step (use B, KiB,"),
                                        ("-1 MiB", "limit -1 MiB: a size is never negative"),
                                        ("inf", "limit takes a size"), ("1 PiB", "unknown unit PiB"),
                                        ("0", "limit 0: give the unit, e.g. 0B"),
                                        (None, "got None"), (-1, "got -1"), (True, "got True")])
def test_a_bad_size_says_how_to_write_one(text, says):
    with pytest.raises(ValueError) as error:
        parse_size(text, "limit")
    assert says in str(error.value)


def test_a_bare_number_is_refused_as_the_command_line_refuses_it():
    """One parser: a size without its unit means what it means to `--max-string` (refused, with the
    units that make it one), never bytes in Python alone."""
    with pytest.raises(ValueError) as error:
        parse_size("100", "--max-string")
    said = subprocess.run([sys.executable, "-m", "vramscope", "analyze", "x.pickle", "--max-string", "100"],
                          capture_output=True, text=True).stderr
    assert str(error.value) == "--max-string 100: give the unit, e.g. 100GiB, or 100MiB (B for bytes)"
    assert str(error.value) in said


def test_format_and_parse_agree():
    assert parse_size(_core.format_bytes(3 << 20).replace(".0", "")) == 3 << 20


def test_marker_arguments_that_would_switch_the_check_off_or_are_not_steps_are_errors_naming_the_marker(pytester):
    pytester.makepyfile(test_markers=textwrap.dedent("""
        import pytest

        @pytest.mark.limit_gpu_leaks(None)
        def test_leaks_none():
            pass

        @pytest.mark.limit_gpu_memory(None)
        def test_memory_none():
            pass

        @pytest.mark.limit_gpu_leaks("1 MiB", steps="abc")
        def test_steps_text():
            pass

        @pytest.mark.limit_gpu_leaks("4 kibibytes")
        def test_unit_unknown(vram_steps):
            for _ in vram_steps(3):
                pass
    """))
    result = pytester.runpytest_subprocess("--vramscope", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*limit_gpu_leaks takes one size, such as \"1 MiB\"; got (None,)*",
                                 "*limit_gpu_memory takes one size, such as \"1 MiB\"; got (None,)*",
                                 "*limit_gpu_leaks: steps='abc' is not a whole number of steps*"])
    unknown = "limit_gpu_leaks 4 kibibytes: unknown unit kibibytes (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
    out = result.stdout.str()
    assert "During handling" not in out
    result.stdout.fnmatch_lines(["*= vramscope =*", f"FAIL test_markers.py::test_unit_unknown: {unknown}"])


def test_markers_without_the_plugin_say_at_the_end_they_were_not_checked(pytester):
    seed_file(pytester, "fast_llm_ctx_losses", fixed=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["vramscope: 1 test(s) marked limit_gpu_leaks or limit_gpu_memory were not checked "
                                 "(run pytest with --vramscope)"])


def test_a_check_that_passes_leaves_no_folder_behind():
    check = LeakCheck(limit="1 MiB", warmup=2)
    with check:
        for _ in range(12):
            torch.ones(64, device=DEVICE) * 2
            check.step()
    assert check.trace is None and not os.path.exists(check._directory)
