// Memory outside torch's caching allocator (a library's own device memory, pinned host memory) and
// NVML's figure: judged by the one judge as torch's sites are, named by the library that called the
// driver, and reconciled in the usage ledger, whose parts sum to NVML's figure exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <tuple>

#include "analysis/analyze.h"
#include "analysis/driver_pages.h"
#include "analysis/libraries.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "events/validate.h"
#include "render/terminal.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "temp_trace.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;
namespace fs = std::filesystem;

using vramscope::testing::temp_trace;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr const char* kTrain = "/home/u/train.py";

// A training loop as a capture with the driver hook records it: torch's parameters, activations
// freed within each step, and what the test adds outside torch's allocator.
struct Loop {
    TraceBuilder b;

    Loop() {
        params = b.stack({{kTrain, 5, "build_model"}});
        activations = b.stack({{kTrain, 30, "train"}});
        b.segment(0x7000'0000'0000, 1ull << 30);
        b.alloc(0x7000'0000'0000, 64 * MiB, params);
    }
    // A library's call of the driver from a Python line: the library frame innermost, as
    // capture/driver_calls.h records it.
    uint32_t driver_stack(const char* library, const char* call, uint32_t line) {
        return b.stack({{library, 0, call}, {kTrain, line, "train"}});
    }
    uint32_t cupy_stack(uint32_t line) {
        return driver_stack("/v/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so", "cuMemAlloc_v2", line);
    }
    void add(EventKind kind, uint64_t addr, uint64_t size, uint32_t stack = 0, uint8_t device = 0) {
        Event e;
        e.kind = kind;
        e.addr = addr;
        e.size = size;
        e.stack = stack;
        e.device = device;
        e.time_us = (b.time += 3);
        b.t.events.push_back(e);
    }
    void nvml(uint64_t bytes, uint8_t device = 0) { add(EventKind::device_usage, 0, bytes, 0, device); }
    // One step of torch's own work, then the step's end.
    void torch_step(int s) {
        const uint64_t act = 0x7000'1000'0000 + uint64_t(s % 2) * 0x100'0000;
        b.alloc(act, 8 * MiB, activations);
        b.free(act, 8 * MiB);
    }
    uint64_t reserved() const { return 1ull << 30; }
    // `n` steps of torch's work alone, each read by NVML before its end where `reading` gives a figure.
    void torch_steps(int n, const std::function<std::optional<uint64_t>(int)>& reading) {
        for (int s = 0; s < n; ++s) {
            torch_step(s);
            if (const std::optional<uint64_t> bytes = reading(s)) nvml(*bytes);
            b.step();
        }
    }

    uint32_t params = 0, activations = 0;
};

const SiteFinding* leak_of(const Findings& f, Memory memory) {
    for (const SiteFinding& l : f.leaks)
        if (l.memory == memory) return &l;
    return nullptr;
}

// Whether one of the findings' notes begins with `words`.
bool has_note(const Findings& f, const std::string& words) {
    return std::any_of(f.notes.begin(), f.notes.end(), [&](const std::string& n) { return n.starts_with(words); });
}

// The findings say first what NVML saw that no recorded allocation explains (or that it could not
// be checked), and so give no verdict.
void expect_said_first_and_no_verdict(const Findings& f, const std::string& note) {
    EXPECT_EQ(f.verdict, Verdict::cannot_judge);
    ASSERT_FALSE(f.notes.empty());
    EXPECT_EQ(f.notes[0].find(note), 0u) << f.notes[0];
}

// The parts of a device's usage ledger, added up.
int64_t parts(const UsageLedger& u) {
    int64_t sum = int64_t(u.torch_reserved) + int64_t(u.context.value_or(0)) + u.page_rounding.value_or(0) +
                  u.unexplained.value_or(0);
    for (const LibraryBytes& l : u.libraries) sum += int64_t(l.bytes);
    return sum;
}

}  // namespace

TEST(Libraries, EachSharedObjectIsNamedByItsHolder) {
    EXPECT_EQ(library_name("/usr/lib/x86_64-linux-gnu/libnccl.so.2"), "NCCL");
    EXPECT_EQ(library_name("/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12"), "cuBLAS");
    EXPECT_EQ(library_name("/usr/local/cuda/lib64/libcublas.so.12"), "cuBLAS");
    EXPECT_EQ(library_name("/x/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9"), "cuDNN");
    EXPECT_EQ(library_name("/x/libcufft.so.11"), "cuFFT");
    EXPECT_EQ(library_name("/x/libcusparse.so.12"), "cuSPARSE");
    EXPECT_EQ(library_name("/x/libcusolver.so.11"), "cuSOLVER");
    EXPECT_EQ(library_name("/x/libcurand.so.10"), "cuRAND");
    EXPECT_EQ(library_name("/v/site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so"), "CuPy");
    EXPECT_EQ(library_name("/v/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so"), "CuPy");
    EXPECT_EQ(library_name("/v/site-packages/jaxlib/xla_extension.so"), "JAX/XLA");
    EXPECT_EQ(library_name("/v/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so"), "JAX/XLA");
    EXPECT_EQ(library_name("/v/lib/libpjrt_c_api_gpu.so"), "JAX/XLA");
    EXPECT_EQ(library_name("/v/site-packages/triton/backends/nvidia/lib/cuda_utils.so"), "Triton");
    EXPECT_EQ(library_name("/home/u/.triton/cache/ab12/cuda_utils.so"), "Triton");
    EXPECT_EQ(library_name("/v/site-packages/torch/lib/libc10_cuda.so"), "torch");
    EXPECT_EQ(library_name("/v/site-packages/torch/lib/libtorch_cuda.so"), "torch");
    EXPECT_EQ(library_name("<unknown library>"), "unknown library");
    EXPECT_EQ(library_name("/home/u/build/leaky_ext.so"), "leaky_ext.so");
    EXPECT_TRUE(is_shared_object("/usr/lib/libnccl.so.2"));
    EXPECT_TRUE(is_shared_object("<unknown library>"));
    EXPECT_FALSE(is_shared_object("/home/u/train.py"));
    EXPECT_FALSE(is_shared_object("/home/u/also.so.py"));
}

// 2 MiB a step from an extension's cuMemAlloc at the line that also allocates (and frees) torch's
// activations: the two stay apart, the library's is the leak, and torch's ledger holds none of it.
TEST(Usage, ALibrarysDeviceMemoryKeptEveryStepIsAnExternalLeakAtItsPythonLine) {
    Loop run;
    run.b.t.devices[0].total_memory = 16ull << 30;
    const uint32_t leaky = run.driver_stack("/home/u/build/libleaky.so", "cuMemAlloc_v2", 30);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        run.add(EventKind::external_alloc, 0x7100'0000'0000 + uint64_t(s) * 4 * MiB, 2 * MiB, leaky);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(f.verdict, Verdict::leak);
    ASSERT_EQ(f.leaks.size(), 1u);
    const SiteFinding& l = f.leaks[0];
    EXPECT_EQ(l.memory, Memory::external);
    EXPECT_EQ(l.library, "libleaky.so");
    EXPECT_EQ(l.site.file, kTrain);
    EXPECT_EQ(l.site.line, 30u);
    EXPECT_NEAR(l.bytes_per_step, 2.0 * MiB, 0.01 * MiB);
    EXPECT_NEAR(f.leak_bytes_per_step, 2.0 * MiB, 0.01 * MiB);
    ASSERT_FALSE(l.stack.empty());
    EXPECT_EQ(l.stack[0].file, "/home/u/build/libleaky.so");  // the library first, then its Python caller
    EXPECT_EQ(l.stack[0].function, "cuMemAlloc_v2");
    // Torch's allocated bytes hold none of it: their ledger balances at no growth.
    ASSERT_EQ(f.ledger.size(), 1u);
    EXPECT_EQ(f.ledger[0].growth, 0);
    EXPECT_TRUE(f.ledger[0].balanced());
    const StepPoint& last = f.devices[0].timeline[29];
    EXPECT_EQ(last.external, 30 * 2 * MiB);
    EXPECT_EQ(last.allocated, 64 * MiB);
    EXPECT_EQ(last.reserved, run.reserved());
    // The projected OOM counts the library's memory beside torch's.
    EXPECT_EQ(f.devices[0].projected_oom_step,
              projected_oom_step(29, 16ull << 30, last.peak_allocated + last.external, l.recent_bytes_per_step));
    ASSERT_FALSE(f.usage.empty());
    ASSERT_EQ(f.usage[0].libraries.size(), 1u);
    EXPECT_EQ(f.usage[0].libraries[0].library, "libleaky.so");
    EXPECT_EQ(f.usage[0].libraries[0].bytes, 60 * MiB);
    EXPECT_EQ(f.usage[0].libraries[0].growth, int64_t(f.step_count - 1 - f.warmup_steps) * int64_t(2 * MiB));
}

// A cuBLAS workspace taken in the first step and kept: warm-up, not a leak.
TEST(Usage, AWorkspaceAllocatedOnceIsWarmUpNotALeak) {
    Loop run;
    const uint32_t workspace = run.driver_stack("/v/nvidia/cublas/lib/libcublasLt.so.12", "cuMemAlloc_v2", 31);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        if (s == 0) run.add(EventKind::external_alloc, 0x7100'0000'0000, 32 * MiB, workspace);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(f.leaks.empty());
    const auto warm = std::find_if(f.not_leaks.begin(), f.not_leaks.end(), [](const NotLeak& n) {
        return n.kind == NotLeakKind::warm_up && n.why.find("outside torch's allocator") != std::string::npos;
    });
    ASSERT_NE(warm, f.not_leaks.end());
    EXPECT_EQ(warm->bytes, 32 * MiB);
    EXPECT_NE(warm->why.find("by cuBLAS at train.py:31"), std::string::npos) << warm->why;
    ASSERT_EQ(f.usage[0].libraries.size(), 1u);
    EXPECT_EQ(f.usage[0].libraries[0].library, "cuBLAS");
    EXPECT_EQ(f.usage[0].libraries[0].growth, 0);
}

// Pinned host memory kept every step (torch's host allocator): a pinned leak, on the host's
// ledger, bringing no device nearer its OOM.
TEST(Usage, PinnedHostMemoryKeptEveryStepIsAPinnedLeakOfTheHost) {
    Loop run;
    run.b.t.devices[0].total_memory = 16ull << 30;
    const uint32_t staging = run.driver_stack("/v/site-packages/torch/lib/libtorch_cuda.so", "cuMemHostAlloc", 40);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        run.add(EventKind::pinned_alloc, 0x5500'0000'0000 + uint64_t(s) * MiB, 1 * MiB, staging);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(f.verdict, Verdict::leak);
    const SiteFinding* l = leak_of(f, Memory::pinned);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->library, "torch");
    EXPECT_EQ(l->site.line, 40u);
    EXPECT_NEAR(l->bytes_per_step, 1.0 * MiB, 0.01 * MiB);
    EXPECT_FALSE(f.devices[0].projected_oom_step);
    EXPECT_EQ(f.devices[0].timeline[29].pinned, 30 * MiB);
    EXPECT_EQ(f.devices[0].timeline[29].external, 0u);
    ASSERT_EQ(f.usage.size(), 2u);  // the device, then the host
    EXPECT_FALSE(f.usage[1].device);
    ASSERT_EQ(f.usage[1].libraries.size(), 1u);
    EXPECT_EQ(f.usage[1].libraries[0].library, "torch");
    EXPECT_EQ(f.usage[1].libraries[0].bytes, 30 * MiB);
    EXPECT_TRUE(f.usage[0].libraries.empty());
}

// NVML's figure is torch's reserved bytes, each library's own, the context and what is left: at
// the end of warm-up the residual is the context; growth nobody recorded is unexplained.
TEST(Usage, TheLedgersPartsSumToNvmlsFigureAndGrowthNoAllocationExplainsIsNoNoLeak) {
    for (const uint64_t unrecorded : {uint64_t(0), 4 * MiB}) {
        SCOPED_TRACE(unrecorded);
        Loop run;
        const uint32_t nccl = run.driver_stack("/usr/lib/libnccl.so.2", "cuMemCreate", 50);
        const uint32_t cupy = run.cupy_stack(51);
        constexpr uint64_t kContext = 500 * MiB;
        for (int s = 0; s < 30; ++s) {
            run.torch_step(s);
            if (s == 0) run.add(EventKind::external_alloc, 0x1234, 96 * MiB, nccl);  // a VMM handle
            const uint64_t buffer = 0x7200'0000'0000 + uint64_t(s % 2) * 64 * MiB;  // CuPy's: replaced each step
            run.add(EventKind::external_alloc, buffer, 16 * MiB, cupy);
            if (s > 0) run.add(EventKind::external_free, 0x7200'0000'0000 + uint64_t((s + 1) % 2) * 64 * MiB, 16 * MiB);
            run.nvml(run.reserved() + 96 * MiB + 16 * MiB + kContext + uint64_t(s) * unrecorded);
            run.b.step();
        }
        const Findings f = analyze(run.b.t);
        ASSERT_EQ(f.usage.size(), 1u);
        const UsageLedger& u = f.usage[0];
        ASSERT_TRUE(u.nvml_used && u.context && u.unexplained);
        EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
        EXPECT_EQ(u.torch_reserved, run.reserved());
        ASSERT_EQ(u.libraries.size(), 2u);
        EXPECT_EQ(u.libraries[0].library, "NCCL");
        EXPECT_EQ(u.libraries[0].bytes, 96 * MiB);
        EXPECT_EQ(u.libraries[1].library, "CuPy");
        EXPECT_EQ(u.libraries[1].bytes, 16 * MiB);
        EXPECT_EQ(*u.context, kContext + f.warmup_steps * unrecorded);
        EXPECT_EQ(*u.unexplained, int64_t((29 - f.warmup_steps) * unrecorded));
        EXPECT_EQ(f.devices[0].timeline[29].nvml_used, u.nvml_used);
        EXPECT_TRUE(f.leaks.empty());
        if (unrecorded == 0) {
            EXPECT_EQ(f.verdict, Verdict::no_leak);
        } else {
            EXPECT_EQ(f.verdict, Verdict::cannot_judge);
            ASSERT_FALSE(f.notes.empty());
            EXPECT_EQ(f.notes[0].find("NVML says the process grew by " + std::to_string((29 - f.warmup_steps) * 4) +
                                      ".0 MiB on cuda:0"),
                      0u)
                << f.notes[0];
        }
    }
}

// NVML is read a thousandth of the run's time at most: fast steps end without a reading. The
// ledger is taken at the last step end that has one, its parts of that moment; and the reading at
// close, after the last step end, stands for that step end when nothing changed between them.
TEST(Usage, TheLedgerIsAtTheLastStepEndNvmlReadAndTheReadingAtCloseServesTheLastStep) {
    for (const bool changed_after : {false, true}) {
        SCOPED_TRACE(changed_after);
        Loop run;
        const uint32_t cupy = run.cupy_stack(51);
        constexpr uint64_t kContext = 500 * MiB;
        uint64_t kept = 0;
        for (int s = 0; s < 30; ++s) {
            run.torch_step(s);
            run.add(EventKind::external_alloc, 0x7200'0000'0000 + uint64_t(s) * 4 * MiB, 2 * MiB, cupy);  // kept: a leak
            kept += 2 * MiB;
            if (s % 7 == 0) run.nvml(run.reserved() + kept + kContext);
            run.b.step();
        }
        if (changed_after) run.add(EventKind::external_alloc, 0x7300'0000'0000, 2 * MiB, cupy), kept += 2 * MiB;
        run.nvml(run.reserved() + kept + kContext);  // at close
        const Findings f = analyze(run.b.t);
        ASSERT_EQ(f.usage.size(), 1u);
        const UsageLedger& u = f.usage[0];
        ASSERT_TRUE(u.nvml_used && u.context && u.unexplained);
        EXPECT_EQ(u.step, changed_after ? 28u : 29u);  // step 28's end read NVML; 29's only at close
        EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
        EXPECT_EQ(*u.unexplained, 0);
        EXPECT_EQ(*u.context, kContext);
        EXPECT_EQ(u.libraries.at(0).bytes, (u.step + 1) * 2 * MiB);
        EXPECT_EQ(f.verdict, Verdict::leak);
    }
}

// Only the reading at close stands for the step end before it. One within the run is its own
// step's: carried back to the first judged step end, it would make the context of growth that
// came before it, and no recorded allocation explains.
TEST(Usage, AReadingWithinTheRunIsNotCarriedBackToTheStepEndBeforeIt) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB, kGrew = 300 * MiB;
    run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
        if (s == 0) return run.reserved() + kContext;  // as the device is first watched
        if (s == 4 || s == 14 || s == 21 || s == 28) return run.reserved() + kContext + kGrew;  // reads when due
        return std::nullopt;
    });
    const Findings f = analyze(run.b.t);
    ASSERT_GT(f.warmup_steps, 0u);
    ASSERT_LT(f.warmup_steps, 4u);
    const UsageLedger& u = f.usage.at(0);
    EXPECT_EQ(u.step, 28u);
    EXPECT_EQ(*u.context, kContext);
    EXPECT_EQ(*u.unexplained, int64_t(kGrew));
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 300.0 MiB on cuda:0 from step 0 to 28");
}

// The reading taken as a device is first watched comes before the first step's segments. Set
// against that step end's holdings it would make them the context's, or growth nobody recorded:
// it stands for no step end, and the context is NVML's residual at the first step end read after.
TEST(Usage, TheReadingAsTheDeviceIsFirstWatchedIsNotTheFirstStepEnds) {
    for (const int warmup : {-1, 0}) {
        SCOPED_TRACE(warmup);
        Loop run;
        constexpr uint64_t kContext = 500 * MiB, kSegment = 256 * MiB;
        run.nvml(run.reserved() + kContext);  // as the device is first watched
        run.b.segment(0x7100'0000'0000, kSegment);  // the first step's: its end is too soon to read NVML
        run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
            if (s == 4 || s == 14 || s == 21 || s == 28) return run.reserved() + kSegment + kContext;
            return std::nullopt;
        });
        AnalysisOptions o;
        o.judge.warmup = warmup;
        const Findings f = analyze(run.b.t, o);
        EXPECT_FALSE(f.devices[0].timeline[0].nvml_used);
        const UsageLedger& u = f.usage.at(0);
        EXPECT_EQ(u.step, 28u);
        EXPECT_EQ(*u.context, kContext);
        EXPECT_EQ(*u.unexplained, 0);
        EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
        EXPECT_EQ(f.verdict, Verdict::no_leak);
        EXPECT_FALSE(has_note(f, "NVML"));
    }
}

// The reading at close, after a teardown freed what no allocation recorded, would show none of
// the growth the run's readings saw: it does not stand for the last step end then.
TEST(Usage, AReadingAtCloseThatWouldHideGrowthTheRunShowedIsNotTaken) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB;
    run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {  // 10 MiB a step, unrecorded
        if (s % 7 == 0) return run.reserved() + kContext + uint64_t(s) * 10 * MiB;
        return std::nullopt;
    });
    run.nvml(run.reserved() + kContext);  // at close, the unrecorded memory freed by the script's end
    const Findings f = analyze(run.b.t);
    const UsageLedger& u = f.usage.at(0);
    EXPECT_EQ(u.step, 28u);
    EXPECT_GT(*u.unexplained, int64_t(200 * MiB));
    EXPECT_EQ(f.verdict, Verdict::cannot_judge);
}

// A reading that is its own base checks nothing: with none before it (the one as the device was
// first watched lost, say), the reading at close alone is said to check nothing, and the verdict
// stands on what was recorded, as in a capture without NVML.
TEST(Usage, AReadingWithNoneBeforeItChecksNothingAndIsSaid) {
    Loop run;
    run.torch_steps(30, [](int) { return std::optional<uint64_t>(); });
    run.nvml(run.reserved() + 800 * MiB);  // at close: 300 MiB of it nobody recorded, unknowable
    const Findings f = analyze(run.b.t);
    const UsageLedger& u = f.usage.at(0);
    EXPECT_EQ(u.step, 29u);
    EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
    EXPECT_EQ(*u.unexplained, 0);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(has_note(f, "NVML was read on cuda:0 at one step end only from the end of warm-up on (29), with none before "
                            "it: memory that no recorded allocation explains could not be checked there."));
}

// Modules loaded in warm-up after an early reading, none at the end of warm-up: the context is
// that earlier reading's, the load reads as growth nobody recorded, and the note says why. With a
// reading at the end of warm-up (what a capture now takes), the load is the context's.
TEST(Usage, ModulesWarmUpLoadedAfterAnEarlyReadingAreSaidToBeWarmUps) {
    for (const bool read_at_warm_up_end : {false, true}) {
        SCOPED_TRACE(read_at_warm_up_end);
        Loop run;
        run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
            const uint64_t modules = s >= 2 ? 64 * MiB : 0;  // loaded in step 2
            if (s == 1 || (s == 3 && read_at_warm_up_end) || s >= 6) return run.reserved() + 500 * MiB + modules;
            return std::nullopt;
        });
        const Findings f = analyze(run.b.t);
        ASSERT_EQ(f.warmup_steps, 3u);
        if (read_at_warm_up_end) {
            EXPECT_EQ(f.verdict, Verdict::no_leak);
            EXPECT_EQ(*f.usage.at(0).context, 564 * MiB);
            continue;
        }
        expect_said_first_and_no_verdict(f, "NVML says the process grew by 64.0 MiB on cuda:0 from step 1 to 29");
        EXPECT_NE(f.notes[0].find("The CUDA context was read at step 1, before warm-up ended (step 3), so what warm-up "
                                  "loaded after it is counted here too: a capture reads NVML where the warm-up it is "
                                  "given ends (track(warmup=3), vramscope run --warmup 3)."),
                  std::string::npos)
            << f.notes[0];
    }
}

// When the reading at close stands for the last step end, the one before it is checked too:
// growth past the allowance there is not hidden by a close reading a little lower.
TEST(Usage, TheReadingTheOneAtClosePassedOverIsCheckedToo) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB;
    run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
        if (s == 0) return run.reserved() + kContext;
        if (s == 28) return run.reserved() + kContext + 1900 * 1024;  // 1.9 MiB nobody recorded
        return std::nullopt;
    });
    run.nvml(run.reserved() + kContext + 950 * 1024);  // at close: within 1 MiB of it
    const Findings f = analyze(run.b.t);
    const UsageLedger& u = f.usage.at(0);
    EXPECT_EQ(u.step, 29u);
    EXPECT_EQ(*u.unexplained, int64_t(950 * 1024));
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 1.9 MiB on cuda:0 from step 0 to 28");
}

// No reading among the judged steps, none after them (a window of `--steps`, a run killed): what no
// recorded allocation explains could not be checked there, which is said; the verdict stands. One
// at close after memory changed checks them together with what came after them.
TEST(Usage, NoReadingAmongTheJudgedStepsIsSaid) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB;
    run.torch_steps(30, [&](int s) { return s == 0 ? std::optional<uint64_t>(run.reserved() + kContext) : std::nullopt; });
    const Findings f = analyze(run.b.t);
    ASSERT_GT(f.warmup_steps, 0u);
    EXPECT_EQ(f.usage.at(0).step, 29u);
    EXPECT_FALSE(f.usage.at(0).nvml_used);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(has_note(f, "NVML was read on cuda:0 but at no judged step end (" + std::to_string(f.warmup_steps) + " to 29)"));
}

// NVML was read, but no reading stands for a step end (the one as the device was first watched,
// before the first step's segments, and a run killed before the next; or a window of `--steps`
// holding none): that nothing could be checked is still said.
TEST(Usage, NvmlReadWhereNoReadingStandsForAStepEndIsSaid) {
    for (const bool window : {false, true}) {
        SCOPED_TRACE(window);
        Loop run;
        run.nvml(run.reserved() + 500 * MiB);  // as the device is first watched
        run.b.segment(0x7100'0000'0000, 256 * MiB);
        run.torch_steps(30, [&](int s) {
            return window && s == 25 ? std::optional<uint64_t>(run.reserved() + 756 * MiB) : std::nullopt;
        });
        AnalysisOptions o;
        if (window) o.first_step = 3, o.last_step = 20;
        const Findings f = analyze(run.b.t, o);
        EXPECT_EQ(f.verdict, Verdict::no_leak);
        EXPECT_TRUE(has_note(f, "NVML was read on cuda:0 but at no judged step end"));
    }
}

// A reading is an observation of its own moment, whether or not it stands for its step end: one
// followed in its step by a segment is checked with the holdings it was read with.
TEST(Usage, AReadingThatStandsForNoStepEndIsCheckedAtItsOwnMoment) {
    Loop run;
    uint64_t side = 0;
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        run.nvml(run.reserved() + side + 500 * MiB + uint64_t(s) * 10 * MiB);  // 10 MiB a step nobody recorded
        if (s % 2 == 0) run.b.segment(0x7100'0000'0000, 20 * MiB), side = 20 * MiB;  // after the reading
        else run.add(EventKind::segment_free, 0x7100'0000'0000, 20 * MiB), side = 0;
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    const size_t base = f.warmup_steps;  // the last read at or before the first judged step end
    expect_said_first_and_no_verdict(f, "NVML says the process grew by " + std::to_string((29 - base) * 10) +
                                            ".0 MiB on cuda:0 from step " + std::to_string(base) + " to 29");
}

// The reading at close, when it does not stand for the last step end, is checked too. Where the
// last step end read NVML itself, what came after is the unfinished step's, which no verdict is of:
// growth there that no recorded allocation explains is said, and the verdict stands. Where it read
// none, the growth may be the judged steps': it keeps the verdict from "no leak". Explained (a
// library's workspace taken after training, as cuSOLVER's is by an SVD after the last step end),
// it says nothing either way.
TEST(Usage, TheReadingAtCloseIsCheckedAndBlocksWhereTheLastStepEndReadNone) {
    for (const bool last_read : {false, true})
        for (const uint64_t unrecorded : {uint64_t(0), 50 * MiB}) {
            SCOPED_TRACE(std::to_string(last_read) + " " + std::to_string(unrecorded));
            Loop run;
            constexpr uint64_t kContext = 500 * MiB, kWorkspace = 96 * MiB;
            run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
                if (s % 7 == 0 || (last_read && s == 29)) return run.reserved() + kContext;
                return std::nullopt;
            });
            // After the last step end: a library's workspace, recorded, and what nobody recorded.
            run.add(EventKind::external_alloc, 0x7200'0000'0000, kWorkspace,
                    run.driver_stack("/x/nvidia/cusolver/lib/libcusolver.so.11", "cuMemAlloc_v2", 80));
            run.nvml(run.reserved() + kWorkspace + kContext + unrecorded);
            const Findings f = analyze(run.b.t);
            const UsageLedger& u = f.usage.at(0);
            EXPECT_EQ(u.step, last_read ? 29u : 28u);
            EXPECT_EQ(*u.unexplained, 0);
            if (!unrecorded) {
                EXPECT_EQ(f.verdict, Verdict::no_leak);
                EXPECT_TRUE(f.notes.empty());
            } else if (last_read) {
                EXPECT_EQ(f.verdict, Verdict::no_leak);
                EXPECT_TRUE(has_note(f, "NVML's reading as the run ended shows 50.0 MiB more on cuda:0 than at the last step "
                                        "end (29) that no recorded allocation explains"));
                EXPECT_EQ(f.notes.size(), 1u);
            } else {
                expect_said_first_and_no_verdict(f, "NVML says the process grew by 50.0 MiB on cuda:0 from step 0 to the "
                                                    "run's end (after step 29, whose end NVML did not read)");
            }
        }
}

// Growth the judged steps' readings showed is said once, by them: the reading at close after a last
// step end that was read says only what came after it (here nothing: CuPy's pool kept on a GPU
// run, tests/data/device/cupy_kept.vscope, read the same).
TEST(Usage, TheReadingAtCloseSaysOnlyWhatCameAfterTheLastStepEnd) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB;
    run.torch_steps(30, [&](int s) { return std::optional<uint64_t>(run.reserved() + kContext + (s > 10 ? 16 * MiB : 0)); });
    run.b.segment(0x7100'0000'0000, 2 * MiB);  // after the last step end
    run.nvml(run.reserved() + 2 * MiB + kContext + 16 * MiB);
    const Findings f = analyze(run.b.t);
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 16.0 MiB on cuda:0 from step");
    EXPECT_EQ(f.notes.size(), 1u) << f.notes.back();
}

// The allowance is 2% of NVML's growth: where its figure fell (torch gave 8 GiB of segments back),
// growth nobody recorded is no less unexplained.
TEST(Usage, AFallInNvmlsFigureWidensNoAllowance) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB, kBig = 8ull << 30, kUnrecorded = 100 * MiB;
    run.b.segment(0x7800'0000'0000, kBig);
    uint64_t big = kBig;
    run.torch_steps(30, [&](int s) -> std::optional<uint64_t> {
        if (s == 10) run.add(EventKind::segment_free, 0x7800'0000'0000, kBig), big = 0;
        if (s % 5 == 4) return run.reserved() + big + kContext + (s >= 15 ? kUnrecorded : 0);
        return std::nullopt;
    });
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(*f.usage.at(0).unexplained, int64_t(kUnrecorded));
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 100.0 MiB on cuda:0 from step 4 to 29");
}

// A reading that is its own base checks nothing of the judged steps, whatever the reading at close
// says of what came after them: that is still said.
TEST(Usage, AReadingAtCloseChecksNothingOfTheJudgedStepsAfterOneThatIsItsOwnBase) {
    Loop run;
    run.torch_steps(30, [&](int s) { return s == 29 ? std::optional<uint64_t>(run.reserved() + 500 * MiB) : std::nullopt; });
    run.nvml(run.reserved() + 500 * MiB);  // at close
    const Findings f = analyze(run.b.t);
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_TRUE(has_note(f, "NVML was read on cuda:0 at one step end only from the end of warm-up on (29), with none before it"));
}

// The context is the residual of the last reading at or before the first judged step end, whether
// it stands for that step end or not (a segment taken after it, before the marker): only the one
// taken as the device is first watched is passed over.
TEST(Usage, AReadingAtTheEndOfWarmUpThatStandsForNoStepEndIsStillTheContexts) {
    Loop run;
    constexpr uint64_t kContext = 500 * MiB, kUnrecorded = 50 * MiB;
    uint64_t side = 64 * MiB, unrecorded = 0;
    run.nvml(run.reserved() + kContext);  // as the device is first watched
    run.b.segment(0x7300'0000'0000, side);  // the first step's segment, after that reading
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        if (s == 5) unrecorded = kUnrecorded;
        if (s == 3 || (s >= 8 && s % 5 == 3)) run.nvml(run.reserved() + side + kContext + unrecorded);
        if (s == 3) run.b.segment(0x7100'0000'0000, 20 * MiB), side += 20 * MiB;  // after the reading, before the marker
        run.b.step();
    }
    AnalysisOptions o;
    o.judge.warmup = 3;
    const Findings f = analyze(run.b.t, o);
    EXPECT_EQ(*f.usage.at(0).context, kContext);
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 50.0 MiB on cuda:0 from step 3 to 28");
}

// The driver maps device memory in 2 MiB pages, and NVML counts pages: what an allocation may
// show beyond its bytes is the rest of its last page, and never more than itself (small ones share).
TEST(Usage, AnAllocationLargerThanHalfAPageMayShowTheRestOfItsPageAndASmallerOneNothing) {
    EXPECT_EQ(page_rounding_bound(3 * MiB / 2), MiB / 2);  // CuPy's 1.5 MiB: a page of its own
    EXPECT_EQ(page_rounding_bound(2 * MiB), 0u);
    EXPECT_EQ(page_rounding_bound(3 * MiB), MiB);
    EXPECT_EQ(page_rounding_bound(MiB + 1), MiB - 1);
    EXPECT_EQ(page_rounding_bound(MiB), 0u);  // two share a page
    EXPECT_EQ(page_rounding_bound(4096), 0u);
    EXPECT_EQ(page_rounding_bound(0), 0u);
    EXPECT_TRUE(maps_own_pages("cuMemAlloc_v2"));
    EXPECT_FALSE(maps_own_pages("cuMemAllocAsync"));  // a pool's pages
    EXPECT_FALSE(maps_own_pages("cuMemCreate"));      // whole pages already
}

// A library that takes `count` buffers of `size` bytes through `call` once, after warm-up (step
// 12), and keeps them, while NVML's figure grows by `nvml_growth` then; NVML read at every step end.
static Findings taken_once(const char* library, uint64_t count, uint64_t size, uint64_t nvml_growth,
                           const char* call = "cuMemAlloc_v2") {
    Loop run;
    const uint32_t stack = run.driver_stack(library, call, 51);
    uint64_t grown = 0;
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        if (s == 12) {
            for (uint64_t k = 0; k < count; ++k) run.add(EventKind::external_alloc, 0x7200'0000'0000 + k * 4 * MiB, size, stack);
            grown = nvml_growth;
        }
        run.nvml(run.reserved() + grown + 500 * MiB);
        run.b.step();
    }
    return analyze(run.b.t);
}

constexpr const char* kCuPy = "/v/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so";

// Eight 1.5 MiB buffers: NVML grows by their eight 2 MiB pages. The 4 MiB beyond their bytes is
// the driver's pages, in the ledger as such: it is no memory nobody recorded (before, a "cannot
// judge" beside a run that leaks nothing).
TEST(Usage, TheDriversPagesOfALibrarysSmallBuffersAreNotUnexplained) {
    const Findings f = taken_once(kCuPy, 8, 3 * MiB / 2, 8 * 2 * MiB);
    const UsageLedger& u = f.usage.at(0);
    ASSERT_TRUE(u.nvml_used && u.context && u.page_rounding && u.unexplained);
    EXPECT_EQ(*u.context, 500 * MiB);
    EXPECT_EQ(*u.page_rounding, int64_t(4 * MiB));
    EXPECT_EQ(*u.unexplained, 0);
    EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
    EXPECT_EQ(f.verdict, Verdict::no_leak);
    EXPECT_FALSE(has_note(f, "NVML says"));
    const std::string out = render_summary(f, false);
    EXPECT_NE(out.find("driver's pages 4.0 MiB"), std::string::npos) << out;
}

// Allocations of half a page or less share pages: sixteen of 512 KiB fill four, and cover none of
// the 8 MiB beside them that nobody recorded. Nor does a pool's allocation, whose pages are the
// pool's: 1.5 MiB buffers from cuMemAllocAsync cover none of their pages' rest.
TEST(Usage, SmallAllocationsAndAPoolsCoverNoGrowthNobodyRecorded) {
    for (const auto& [size, count, call] : {std::tuple{MiB / 2, uint64_t(16), "cuMemAlloc_v2"},
                                            std::tuple{3 * MiB / 2, uint64_t(8), "cuMemAllocAsync"}}) {
        SCOPED_TRACE(call);
        const Findings f = taken_once(kCuPy, count, size, count * size + 8 * MiB, call);
        const UsageLedger& u = f.usage.at(0);
        ASSERT_TRUE(u.page_rounding && u.unexplained);
        EXPECT_EQ(*u.page_rounding, 0);
        EXPECT_EQ(*u.unexplained, int64_t(8 * MiB));
        EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
        expect_said_first_and_no_verdict(f, "NVML says the process grew by 8.0 MiB on cuda:0 from step");
    }
}

// Pages given back count as the pages taken do: sixteen 1.5 MiB buffers kept from warm-up and freed
// at step 12 take 32 MiB off NVML's figure, 8 MiB of it their pages' rest, so the 8 MiB nobody
// recorded that arrives then is not hidden by their fall.
TEST(Usage, PagesGivenBackHideNoGrowthNobodyRecorded) {
    Loop run;
    const uint32_t cupy = run.driver_stack(kCuPy, "cuMemAlloc_v2", 51);
    uint64_t nvml = run.reserved() + 500 * MiB + 16 * 2 * MiB;
    for (uint64_t k = 0; k < 16; ++k) run.add(EventKind::external_alloc, 0x7200'0000'0000 + k * 4 * MiB, 3 * MiB / 2, cupy);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        if (s == 12) {
            for (uint64_t k = 0; k < 16; ++k) run.add(EventKind::external_free, 0x7200'0000'0000 + k * 4 * MiB, 3 * MiB / 2);
            nvml = run.reserved() + 500 * MiB + 8 * MiB;
        }
        run.nvml(nvml);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    const UsageLedger& u = f.usage.at(0);
    ASSERT_TRUE(u.page_rounding && u.unexplained);
    EXPECT_EQ(*u.page_rounding, -int64_t(8 * MiB));
    EXPECT_EQ(*u.unexplained, int64_t(8 * MiB));
    EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
    expect_said_first_and_no_verdict(f, "NVML says the process grew by 8.0 MiB on cuda:0 from step");
}

// The terminal's usage names the last step end, and a device's ledger of an earlier one says so.
TEST(Usage, TheTerminalSaysWhichStepEndADevicesLedgerIsOf) {
    Loop run;
    const uint32_t staging = run.driver_stack("/v/site-packages/torch/lib/libtorch_cuda.so", "cuMemHostAlloc", 40);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        run.add(EventKind::pinned_alloc, 0x5500'0000'0000 + uint64_t(s) * MiB, MiB, staging);
        if (s % 7 == 0) run.nvml(run.reserved() + 500 * MiB);
        run.b.step();
    }
    const Findings f = analyze(run.b.t);
    ASSERT_EQ(f.usage.size(), 2u);
    EXPECT_EQ(f.usage[0].step, 28u);
    EXPECT_EQ(f.usage[1].step, 29u);  // the host's
    const std::string out = render_summary(f, false);
    const std::string usage = out.substr(out.find("Usage"));
    EXPECT_NE(usage.find("at step 29's end"), std::string::npos) << usage;
    EXPECT_NE(usage.find("(step 28's end)"), std::string::npos) << usage;
    EXPECT_NE(usage.find("pinned 30.0 MiB"), std::string::npos) << usage;
}

// Random mixes of torch's memory, libraries' own, pinned memory and NVML readings (some steps
// none, several devices): every device's ledger sums to NVML's figure exactly, its libraries to
// what the timeline says is outside torch's allocator, the host's to the devices' pinned bytes.
TEST(Usage, OnRandomMixesThePartsSumExactly) {
    const char* const libraries[] = {"/usr/lib/libnccl.so.2", "/x/libcublas.so.12", "/home/u/leaky_ext.so",
                                     "<unknown library>", "/v/cupy_backends/cuda/api/runtime.so"};
    for (uint32_t seed = 1; seed <= 60; ++seed) {
        SCOPED_TRACE(seed);
        std::mt19937_64 rng(seed);
        Loop run;
        std::vector<uint32_t> stacks;
        for (uint32_t k = 0; k < 5; ++k)
            stacks.push_back(run.driver_stack(libraries[k], k % 2 ? "cuMemAlloc_v2" : "cuMemHostAlloc", 60 + k));
        std::vector<std::tuple<EventKind, uint64_t, uint64_t, uint8_t>> live;  // kind, address, size, device
        uint64_t next = 0x7300'0000'0000;
        const int steps = 1 + int(rng() % 40);
        for (int s = 0; s < steps; ++s) {
            run.torch_step(s);
            for (int n = int(rng() % 6); n-- > 0;) {
                const bool pinned = rng() % 3 == 0;
                const auto device = uint8_t(rng() % 2);
                const uint64_t size = 1 + rng() % (8 * MiB);  // not 512-aligned
                run.add(pinned ? EventKind::pinned_alloc : EventKind::external_alloc, next, size, stacks[rng() % 5], device);
                live.emplace_back(pinned ? EventKind::pinned_free : EventKind::external_free, next, size, device);
                next += 16 * MiB;
            }
            while (!live.empty() && rng() % 2) {
                const size_t i = rng() % live.size();
                const auto [kind, addr, size, device] = live[i];
                run.add(kind, addr, size, 0, device);
                live.erase(live.begin() + ptrdiff_t(i));
            }
            for (uint8_t device = 0; device < 2; ++device)
                if (rng() % 4) run.nvml(rng() % (8ull << 30), device);
            run.b.step();
        }
        const Findings f = analyze(run.b.t);
        uint64_t pinned = 0, host = 0;
        for (const UsageLedger& u : f.usage) {
            uint64_t libraries_bytes = 0;
            for (const LibraryBytes& l : u.libraries) libraries_bytes += l.bytes;
            if (!u.device) {
                host = libraries_bytes;
                EXPECT_FALSE(u.nvml_used);
                continue;
            }
            const DeviceSummary& d = *std::find_if(f.devices.begin(), f.devices.end(),
                                                   [&](const DeviceSummary& x) { return x.device == *u.device; });
            EXPECT_EQ(libraries_bytes, d.timeline[u.step].external);
            EXPECT_EQ(u.torch_reserved, d.timeline[u.step].reserved);
            EXPECT_EQ(u.nvml_used, d.timeline[u.step].nvml_used);
            pinned += d.timeline[f.step_count - 1].pinned;  // the host's ledger is at the last step end
            if (u.nvml_used) EXPECT_EQ(int64_t(*u.nvml_used), parts(u));
            EXPECT_EQ(bool(u.nvml_used), bool(u.context));
            for (size_t k = u.step + 1; k < d.timeline.size(); ++k)  // the last step end NVML read
                EXPECT_FALSE(u.nvml_used && d.timeline[k].nvml_used) << k;
        }
        EXPECT_EQ(host, pinned);
    }
}

// A capture records only the frees of what it saw allocated: one of an unknown address, or of
// another size, is damage (no verdict), in the replay's checks and the validator's alike.
TEST(Usage, AFreeOutsideTorchsAllocatorOfAnUnknownAddressIsAnInputFault) {
    for (const bool other_size : {false, true}) {
        Loop run;
        const uint32_t ext = run.driver_stack("/home/u/ext.so", "cuMemHostAlloc", 30);
        for (int s = 0; s < 12; ++s) {
            run.torch_step(s);
            if (s == 6 && other_size) run.add(EventKind::pinned_alloc, 0x5000, 8192, ext);
            if (s == 6) run.add(EventKind::pinned_free, 0x5000, 4096);
            run.b.step();
        }
        const std::string why = other_size ? "whose size is not their allocation's" : "never saw allocated";
        const std::string path = temp_trace("external_fault");
        write_trace(run.b.t, path);
        const Findings streamed = analyze_file(path);
        EXPECT_EQ(streamed.verdict, Verdict::cannot_judge);
        ASSERT_EQ(streamed.input_faults.size(), 1u);
        EXPECT_NE(streamed.input_faults[0].find(why), std::string::npos) << streamed.input_faults[0];
        Trace alone = run.b.t;
        validate_events(alone);
        ASSERT_EQ(alone.faults.size(), 1u);
        EXPECT_NE(alone.faults[0].find(why), std::string::npos) << alone.faults[0];
        fs::remove(path);
    }
}

// What an input cannot show is said plainly.
TEST(Usage, WhatTheInputCannotShowIsSaid) {
    Loop run;
    for (int s = 0; s < 12; ++s) run.torch_step(s), run.b.step();
    run.b.t.format = "torch-snapshot";
    Findings f = analyze(run.b.t);
    EXPECT_TRUE(has_note(f, "A torch snapshot holds only torch's caching allocator"));
    run.b.t.format = "vscope";
    run.b.t.meta["capture.driver"] = "off: CUPTI not found";
    run.b.t.meta["capture.nvml"] = "off: libnvidia-ml.so.1 not found";
    f = analyze(run.b.t);
    EXPECT_TRUE(has_note(f, "Memory outside torch's caching allocator was not recorded (off: CUPTI not found)"));
    EXPECT_TRUE(has_note(f, "NVML was not read (off: libnvidia-ml"));
    run.b.t.meta["capture.driver"] = "cupti";
    run.b.t.meta["capture.nvml"] = "on";
    EXPECT_TRUE(analyze(run.b.t).notes.empty());
}

// The findings' new fields (a leak's memory and library, the timeline's bytes outside torch's
// allocator and NVML's figure, the usage ledger) read back to the same text, through a .vscope file.
TEST(Usage, FindingsOfMemoryOutsideTorchRoundTripThroughTheTraceAndTheJson) {
    Loop run;
    const uint32_t leaky = run.driver_stack("/home/u/build/libleaky.so", "cuMemAlloc_v2", 30);
    const uint32_t staging = run.driver_stack("/v/torch/lib/libtorch_cuda.so", "cuMemHostAlloc", 40);
    for (int s = 0; s < 30; ++s) {
        run.torch_step(s);
        run.add(EventKind::external_alloc, 0x7100'0000'0000 + uint64_t(s) * 4 * MiB, 2 * MiB + 100, leaky);
        run.add(EventKind::pinned_alloc, 0x5500'0000'0000 + uint64_t(s) * MiB, 4096, staging);
        if (s % 3) run.nvml(run.reserved() + 300 * MiB + uint64_t(s) * 2 * MiB);
        run.b.step();
    }
    const std::string path = temp_trace("external_roundtrip");
    write_trace(run.b.t, path, 512);
    Findings f = analyze_file(path), whole = analyze(read_trace(path));
    f.analysis_seconds = whole.analysis_seconds = 0;
    const std::string json = to_json(f);
    EXPECT_EQ(json, to_json(whole));  // streamed as it is read, or read whole first
    const FindingsFile back = read_findings(json, "findings.json");
    ASSERT_EQ(back.runs.size(), 1u);
    EXPECT_EQ(to_json(back.runs[0]), json);
    const Findings& g = back.runs[0];
    ASSERT_NE(leak_of(g, Memory::external), nullptr);
    EXPECT_EQ(leak_of(g, Memory::external)->library, "libleaky.so");
    ASSERT_NE(leak_of(g, Memory::pinned), nullptr);
    EXPECT_EQ(leak_of(g, Memory::pinned)->library, "torch");
    ASSERT_EQ(g.usage.size(), 2u);
    EXPECT_EQ(g.usage[0].device, std::optional<uint16_t>(0));
    EXPECT_TRUE(g.usage[0].nvml_used);
    EXPECT_FALSE(g.usage[1].device);
    EXPECT_EQ(g.devices[0].timeline[10].external, 11 * (2 * MiB + 100));
    EXPECT_EQ(g.devices[0].timeline[10].pinned, 11 * 4096u);
    EXPECT_EQ(g.devices[0].timeline[10].nvml_used, run.reserved() + 300 * MiB + 20 * MiB);
    EXPECT_FALSE(g.devices[0].timeline[9].nvml_used);  // that step read none
    fs::remove(path);
}
