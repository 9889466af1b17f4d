// What the report, the exports and the rank comparison make of findings and traces.
#include <gtest/gtest.h>

#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "common/format.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "render/terminal.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {

Findings run_of_rank(int rank, double leak_per_step, uint64_t peak) {
    Findings f;
    f.meta.emplace_back("rank", std::to_string(rank));
    f.leak_bytes_per_step = leak_per_step;
    DeviceSummary d;
    d.timeline.push_back(StepPoint{peak / 2, peak, peak, 0, {}});
    f.devices.push_back(d);
    return f;
}

}  // namespace

TEST(Terminal, CountsNameTheirUnitAsPeopleDo) {
    EXPECT_EQ(count_of(1, "eval batch"), "1 eval batch");
    EXPECT_EQ(count_of(24, "microbatch"), "24 microbatches");
    EXPECT_EQ(count_of(3, "generate() call"), "3 generate() calls");
    EXPECT_EQ(count_of(2, "site"), "2 sites");
}

TEST(Ranks, OnlySomeRanksLeakingIsSkew) {
    const RankComparison c = compare_ranks({run_of_rank(1, 1 << 20, 1ull << 30), run_of_rank(0, 0, 1ull << 30)});
    ASSERT_EQ(c.rows.size(), 2u);
    EXPECT_EQ(c.rows[0].rank, 0);
    ASSERT_EQ(c.skew.size(), 1u);
    EXPECT_EQ(c.skew[0], "only some ranks leak: rank 1 leaks, rank 0 does not");
}

TEST(Ranks, APeakTenPercentApartIsSkewAndRunsWithoutRanksAreNotCompared) {
    const RankComparison c = compare_ranks({run_of_rank(0, 0, 10ull << 30), run_of_rank(1, 0, 12ull << 30)});
    ASSERT_EQ(c.skew.size(), 1u);
    EXPECT_NE(c.skew[0].find("peak memory differs: rank 1"), std::string::npos);
    EXPECT_TRUE(compare_ranks({Findings{}, Findings{}}).rows.empty());
}

TEST(Export, MemoryVizPickleReadsBackEventForEvent) {
    TraceBuilder b;
    for (int step = 0; step < 12; ++step) {
        b.alloc(0x7f0000000000ull + uint64_t(step) * 4096, 4096, b.stack({{"train.py", 10, "leaky"}}));
        b.alloc(0x7f1000000000ull, 1 << 20, b.stack({{"train.py", 20, "transient"}}));
        b.free(0x7f1000000000ull, 1 << 20);
        b.step();
    }
    const std::string pickled = to_memory_viz_pickle(b.t);
    const Trace back = import_torch_snapshot(pickled, "export.pickle");
    EXPECT_EQ(back.entry_count(), b.t.entry_count() - 12) << "markers are not snapshot entries";
    size_t allocs = 0;
    for (const Event& e : back.events) {
        if (e.kind != EventKind::alloc) continue;
        ++allocs;
        ASSERT_NE(e.stack, 0u);
        const Frame& f = back.stacks.frame(back.stacks.node(e.stack).frame);
        EXPECT_EQ(back.stacks.string(f.file), "train.py");
    }
    EXPECT_EQ(allocs, 24u);
}

TEST(Export, PerfettoTimesAreWholeMicroseconds) {
    TraceBuilder b;
    for (int step = 0; step < 3; ++step) {
        b.alloc(0x7f0000000000ull, 4096, 0);
        b.free(0x7f0000000000ull, 4096);
        b.step();
    }
    for (Event& e : b.t.events) e.time_us += 1795370000123456;  // an epoch time: a double would round it
    const std::string json = to_perfetto_json(b.t, analyze(b.t));
    const std::string first_step = "\"name\":\"step 0\",\"pid\":1,\"tid\":1,\"ts\":" +
                                   std::to_string(b.t.events.front().time_us) + ",";
    EXPECT_NE(json.find(first_step), std::string::npos) << json.substr(0, 400);
    EXPECT_NE(json.find("\"name\":\"step 2\""), std::string::npos);
}

TEST(Report, NoStringCanChangeThePage) {
    const std::string page = report_page(
        "{\"runs\":[{\"source\":\"</script><script>alert(1)</script><!--<script>a&b>\xE2\x80\xA8\xE2\x80\xA9\"}]}",
        "vramscope: </title><script>a&b");
    EXPECT_NE(page.find("<title>vramscope: &lt;/title&gt;&lt;script&gt;a&amp;b</title>"), std::string::npos);
    const size_t data = page.find("<script id=\"data\"");
    const size_t data_end = page.find("</script>", data);
    const std::string embedded = page.substr(data, data_end - data);
    // Inside the data element: not one <, > (past its own tag) or & of the strings, and no raw U+2028/9.
    const std::string body = embedded.substr(embedded.find('>') + 1);
    EXPECT_EQ(body.find_first_of("<>&"), std::string::npos) << body;
    EXPECT_EQ(body.find("\xE2\x80\xA8"), std::string::npos);
    EXPECT_NE(body.find("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\\u003c!--\\u003cscript\\u003ea\\u0026b\\u003e\\u2028\\u2029"),
              std::string::npos) << body;
    EXPECT_EQ(page.find("/*VRAMSCOPE_DATA*/"), std::string::npos);
    EXPECT_EQ(page.find("/*VRAMSCOPE_TITLE*/"), std::string::npos);
}

namespace {

constexpr uint64_t kMiB = 1ull << 20;

SourceLine line_of(const char* file, uint32_t line, const char* function) { return SourceLine{file, line, function}; }

// A run whose leaks are outside torch's caching allocator: an extension's cudaMalloc, and pinned
// host memory from torch's host allocator. Each stack's innermost frame is the calling library's.
Findings leaking_outside_torch() {
    Findings f;
    f.source = "/runs/train.vscope";
    f.format = "vscope";
    f.verdict = Verdict::leak;
    f.step_count = 20;
    f.leak_bytes_per_step = 3.0 * kMiB;
    SiteFinding ext;
    ext.site = line_of("/home/u/train.py", 42, "step");
    ext.memory = Memory::external;
    ext.library = "leaky_ext.so";
    ext.stack = {line_of("/home/u/build/leaky_ext.so", 0, "cuMemAlloc_v2"), ext.site, line_of("/home/u/train.py", 60, "main")};
    ext.bytes_per_step = 2.0 * kMiB;
    ext.first_step = 3;
    ext.confidence = 0.98;
    SiteFinding pinned;
    pinned.site = line_of("/home/u/train.py", 50, "stage");
    pinned.memory = Memory::pinned;
    pinned.library = "torch";
    pinned.stack = {line_of("/site-packages/torch/lib/libtorch_cuda.so", 0, "cuMemHostAlloc"), pinned.site};
    pinned.bytes_per_step = 1.0 * kMiB;
    pinned.first_step = 4;
    pinned.confidence = 0.9;
    pinned.stream = 0x55;  // not shown: host memory has no stream
    f.leaks = {ext, pinned};
    return f;
}

UsageLedger usage_of_device(uint16_t device) {
    UsageLedger u;
    u.device = device;
    u.step = 19;
    u.torch_reserved = 2150 * kMiB;
    u.libraries = {{"NCCL", 512 * kMiB, 0}, {"CuPy", 64 * kMiB, 0}};
    u.context = 520 * kMiB;
    u.unexplained = 0;
    u.nvml_used = u.torch_reserved + 512 * kMiB + 64 * kMiB + *u.context;
    return u;
}

std::string line_with(const std::string& text, const std::string& part) {
    const size_t at = text.find(part);
    if (at == std::string::npos) return "";
    const size_t start = text.rfind('\n', at) + 1;  // npos + 1: the first line
    return text.substr(start, text.find('\n', at) - start);
}

}  // namespace

TEST(Terminal, ALeakOutsideTorchNamesItsMemoryAndLibrary) {
    const std::string out = render_summary(leaking_outside_torch(), false);
    // Under each row: whose memory, from which library, through which driver call.
    EXPECT_NE(out.find("\n       device memory from leaky_ext.so (cuMemAlloc_v2, outside torch's allocator)\n"), std::string::npos)
        << out;
    EXPECT_NE(out.find("\n       pinned host memory (torch's host allocator)\n"), std::string::npos) << out;
    // The library's frame has no line; the pinned site's stream column says where the memory is.
    EXPECT_EQ(line_with(out, "at cuMemAlloc_v2"), "       at cuMemAlloc_v2  /home/u/build/leaky_ext.so") << out;
    EXPECT_NE(line_with(out, "train.py:50 stage  ").find(" host  "), std::string::npos) << out;
    EXPECT_EQ(out.find("side 0x55"), std::string::npos) << out;
}

TEST(Terminal, APinnedLeakFromALibraryNamesItsDriverCall) {
    Findings f = leaking_outside_torch();
    f.leaks.erase(f.leaks.begin());
    f.leaks[0].library = "NCCL";
    f.leaks[0].stack.front() = line_of("/usr/lib/libnccl.so.2", 0, "cuMemHostAlloc");
    EXPECT_NE(render_summary(f, false).find("\n       pinned host memory from NCCL (cuMemHostAlloc)\n"), std::string::npos);
}

TEST(Terminal, TheUsageLedgerSumsNvmlsFigureByHolderUnderEveryVerdict) {
    for (const Verdict verdict : {Verdict::leak, Verdict::no_leak, Verdict::cannot_judge}) {
        Findings f = verdict == Verdict::leak ? leaking_outside_torch() : Findings{};
        f.verdict = verdict;
        UsageLedger host;
        host.step = 19;
        host.libraries = {{"torch", 1024 * kMiB, 0}, {"NCCL", 64 * kMiB, 0}};
        f.usage = {usage_of_device(0), host};
        const std::string out = render_summary(f, false);
        EXPECT_NE(out.find("\nUsage (what the process holds at step 19's end, by holder)\n"
                           "  cuda:0  NVML 3.2 GiB = torch reserved 2.1 GiB + NCCL 512.0 MiB + CuPy 64.0 MiB\n"
                           "          + CUDA context 520.0 MiB + unexplained 0 B\n"
                           "  host    pinned 1.1 GiB = torch 1.0 GiB + NCCL 64.0 MiB\n"),
                  std::string::npos) << name(verdict) << "\n" << out;
    }
}

TEST(Terminal, AUsageLedgerWithoutNvmlShowsTheLibrariesAndNothingElseShowsNothing) {
    Findings f;
    f.verdict = Verdict::no_leak;
    UsageLedger seen = usage_of_device(0), nothing = usage_of_device(1);
    seen.nvml_used = nothing.nvml_used = std::nullopt;
    seen.context = nothing.context = std::nullopt;
    seen.unexplained = nothing.unexplained = std::nullopt;
    nothing.libraries.clear();
    UsageLedger host;  // no pinned memory seen
    f.usage = {seen, nothing, host};
    const std::string out = render_summary(f, false);
    EXPECT_NE(out.find("\n  cuda:0  torch reserved 2.1 GiB + NCCL 512.0 MiB + CuPy 64.0 MiB  (no NVML reading at a judged step end)\n"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("cuda:1"), std::string::npos) << out;
    EXPECT_EQ(out.find("host"), std::string::npos) << out;
    f.usage = {nothing, host};
    EXPECT_EQ(render_summary(f, false).find("Usage"), std::string::npos) << "a run with nothing outside torch is as before";
}

TEST(Terminal, AUsageLedgerOfManyLibrariesBreaksOnlyBetweenTermsWithin100Columns) {
    Findings f;
    f.verdict = Verdict::no_leak;
    UsageLedger u = usage_of_device(0);
    for (const char* lib : {"cuBLAS", "cuDNN", "cuFFT", "JAX/XLA", "Triton", "libsomething_long_name.so", "unknown library"})
        u.libraries.push_back({lib, 3 * kMiB, 0});
    f.usage = {u};
    const std::string out = render_summary(f, false);
    const std::string block = out.substr(out.find("\n  cuda:0  NVML") + 1);
    size_t start = 0, lines = 0;
    while (start < block.size()) {
        const size_t end = block.find('\n', start);
        const std::string line = block.substr(start, end - start);
        EXPECT_LE(line.size(), 100u) << line;
        if (lines++) EXPECT_TRUE(line.starts_with("          + ")) << line;
        start = end + 1;
    }
    EXPECT_GE(lines, 2u);
    EXPECT_NE(block.find("+ libsomething_long_name.so 3.0 MiB"), std::string::npos) << block;
}

namespace {

// Four steps, 5 ms apart: each keeps 2 MiB of an extension's device memory, takes 1 MiB of pinned
// host memory and gives it back, and ends with NVML's reading, as a capture writes them.
TraceBuilder outside_torch_steps() {
    TraceBuilder b;
    const uint32_t ext = b.stack({{"/home/u/build/leaky_ext.so", 0, "cuMemAlloc_v2"}, {"train.py", 42, "step"}});
    const uint32_t pinned = b.stack({{"/torch/lib/libtorch_cuda.so", 0, "cuMemHostAlloc"}, {"train.py", 50, "stage"}});
    auto push = [&](EventKind kind, uint64_t addr, uint64_t size, uint32_t stack = 0) {
        Event e;
        e.kind = kind;
        e.addr = addr;
        e.size = size;
        e.stack = stack;
        e.time_us = (b.time += 3);
        b.t.events.push_back(e);
    };
    for (uint64_t step = 0; step < 4; ++step) {
        b.time += 5000;
        b.alloc(0x7f0000000000ull, 4096, 0);
        b.free(0x7f0000000000ull, 4096);
        push(EventKind::external_alloc, 0x7e0000000000ull + step * 2 * kMiB, 2 * kMiB, ext);
        push(EventKind::pinned_alloc, 0x600000000000ull, kMiB, pinned);
        push(EventKind::pinned_free, 0x600000000000ull, kMiB);
        push(EventKind::device_usage, 0, 1000 * kMiB + step * 2 * kMiB);
        b.step();
    }
    return b;
}

// The `bytes` of each counter sample of one track, in order.
std::vector<uint64_t> counter(const JsonValue& trace, const std::string& track) {
    std::vector<uint64_t> out;
    for (const JsonValue& e : trace.get("traceEvents")->items)
        if (e.get("ph")->str == "C" && e.get("name")->str == track)
            out.push_back(std::stoull(std::string(e.get("args")->get("bytes")->text)));
    return out;
}

}  // namespace

TEST(Export, PerfettoHasATrackForLibrariesPinnedMemoryAndNvmlPerDevice) {
    const TraceBuilder b = outside_torch_steps();
    const std::string json = to_perfetto_json(b.t, Findings{});
    const JsonValue trace = parse_json(json, "perfetto", kMaxJsonDepth);
    EXPECT_EQ(counter(trace, "cuda:0 external"), (std::vector<uint64_t>{2 * kMiB, 4 * kMiB, 6 * kMiB, 8 * kMiB}));
    // Taken and given back inside a millisecond: the taking is drawn, and the step's end shows it gone.
    EXPECT_EQ(counter(trace, "cuda:0 pinned"), (std::vector<uint64_t>{kMiB, 0, kMiB, 0, kMiB, 0, kMiB, 0}));
    EXPECT_EQ(counter(trace, "cuda:0 NVML used"),
              (std::vector<uint64_t>{1000 * kMiB, 1002 * kMiB, 1004 * kMiB, 1006 * kMiB}));
    // Torch's own counter is as it was: its blocks only.
    for (const JsonValue& e : trace.get("traceEvents")->items)
        if (e.get("name")->str == "cuda:0 memory")
            EXPECT_LE(std::stoull(std::string(e.get("args")->get("allocated")->text)), 4096u);
}

TEST(Export, PerfettoWithoutMemoryOutsideTorchHasNoTracksForIt) {
    TraceBuilder b;
    for (int step = 0; step < 3; ++step) {
        b.alloc(0x7f0000000000ull, 4096, 0);
        b.step();
    }
    const std::string json = to_perfetto_json(b.t, Findings{});
    EXPECT_EQ(json.find("external"), std::string::npos);
    EXPECT_EQ(json.find("NVML"), std::string::npos);
}

TEST(Export, APerfettoLeakInstantNamesMemoryOutsideTorch) {
    const TraceBuilder b = outside_torch_steps();
    Findings f = leaking_outside_torch();
    f.leaks[0].first_step = 1;
    const std::string json = to_perfetto_json(b.t, f);
    EXPECT_NE(json.find("\"name\":\"leak starts: train.py:42 step (external: leaky_ext.so)\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"memory\":\"external\",\"library\":\"leaky_ext.so\""), std::string::npos) << json;
}

TEST(Export, MemoryVizPickleHoldsTorchsAllocatorOnly) {
    const TraceBuilder b = outside_torch_steps();
    const Trace back = import_torch_snapshot(to_memory_viz_pickle(b.t), "export.pickle");
    size_t allocs = 0;
    for (const Event& e : back.events) {
        EXPECT_FALSE(is_external_event(e.kind) || e.kind == EventKind::device_usage) << event_kind_name(e.kind);
        allocs += e.kind == EventKind::alloc;
    }
    EXPECT_EQ(allocs, 4u);
}

TEST(Terminal, ALiveLineNamesMemoryOutsideTorch) {
    LiveFinding live;
    live.site = line_of("/home/u/train.py", 42, "step");
    live.bytes_per_step = 2.0 * kMiB;
    live.since_step = 3;
    EXPECT_EQ(render_live(live), "leak: +2.0 MiB/step at train.py:42 step (cuda:0, growing since step 3)");
    live.memory = Memory::external;
    live.library = "NCCL";
    EXPECT_EQ(render_live(live), "leak: +2.0 MiB/step of device memory from NCCL (outside torch's allocator) at train.py:42 step "
                                 "(cuda:0, growing since step 3)");
    live.memory = Memory::pinned;
    live.library = "torch";
    live.shape = Shape::bounded;
    EXPECT_EQ(render_live(live), "withdrawn: pinned host memory (torch's host allocator) at train.py:42 step (cuda:0) made no new "
                                 "high since step 3; it was a cache that filled, not a leak (bounded)");
}

// The seeds' TRL offload case leaked device memory and pinned host memory together: the headline
// gives them apart (the device's OOM counts only its own), and the JSON keeps the host's share.
TEST(Summary, TheHeadlineGivesDeviceAndPinnedHostMemoryApart) {
    Findings f;
    f.verdict = Verdict::leak;
    f.step_unit = "optimizer step";
    for (const auto& [memory, rate] : {std::pair{Memory::torch, 29.5}, std::pair{Memory::pinned, 18.0}}) {
        SiteFinding l;
        l.memory = memory;
        l.bytes_per_step = rate * (1 << 20);
        l.site = SourceLine{"/home/u/train.py", 40, "train"};
        f.leaks.push_back(l);
    }
    f.leak_bytes_per_step = 47.5 * (1 << 20);
    f.pinned_leak_bytes_per_step = 18.0 * (1 << 20);
    const std::string text = render_summary(f, false);
    EXPECT_NE(text.find("LEAK  +29.5 MiB on the device and +18.0 MiB pinned on the host per optimizer step"),
              std::string::npos) << text;
    const FindingsFile back = read_findings(to_json(f), "f.json");
    EXPECT_NEAR(back.runs.front().pinned_leak_bytes_per_step, 18.0 * (1 << 20), 100);  // rates keep 6 digits
}

namespace {

// Twelve steps that each keep 32 KiB, recorded as a live-tensor capture records the host's
// tensors (meta device.0 "cpu") or as the allocator hook records a GPU's.
TraceBuilder kept_each_step(bool live_tensors) {
    TraceBuilder b;
    if (live_tensors) b.t.meta["device.0"] = "cpu";
    const uint32_t kept = b.stack({{"train.py", 12, "forward"}});
    for (int step = 0; step < 12; ++step) {
        b.alloc(0x7f0000000000ull + uint64_t(step) * 32768, 32768, kept);
        b.step();
    }
    return b;
}

}  // namespace

TEST(Terminal, ALiveTensorTraceNamesItsDeviceCpuAndAGpuTraceItsCudaOrdinal) {
    const std::string cpu = render_summary(analyze(kept_each_step(true).t), false);
    EXPECT_NE(cpu.find("\n  cpu  step 0 -> 11: "), std::string::npos) << cpu;  // the ledger
    EXPECT_NE(cpu.find("\n  cpu  384.0 KiB allocated at step 11"), std::string::npos) << cpu;  // the peak
    EXPECT_EQ(cpu.find("cuda"), std::string::npos) << cpu;
    const std::string gpu = render_summary(analyze(kept_each_step(false).t), false);
    EXPECT_NE(gpu.find("\n  cuda:0  step 0 -> 11: "), std::string::npos) << gpu;
    EXPECT_NE(gpu.find("\n  cuda:0  384.0 KiB allocated at step 11"), std::string::npos) << gpu;
}

TEST(Export, PerfettoOfALiveTensorTraceHasACpuCounterWithoutReserved) {
    const TraceBuilder b = kept_each_step(true);
    const std::string json = to_perfetto_json(b.t, analyze(b.t));
    EXPECT_NE(json.find("\"name\":\"cpu memory\""), std::string::npos);
    EXPECT_EQ(json.find("cuda:"), std::string::npos);
    EXPECT_EQ(json.find("\"reserved\""), std::string::npos);
    const TraceBuilder gpu = kept_each_step(false);
    EXPECT_NE(to_perfetto_json(gpu.t, analyze(gpu.t)).find("\"name\":\"cuda:0 memory\""), std::string::npos);
}

namespace {

// 60 leak sites, 2,000 bounded caches and 20 devices: more of each kind than any view shows.
Findings of_many_entries() {
    Findings f;
    f.verdict = Verdict::leak;
    f.step_count = 100;
    for (int k = 0; k < 60; ++k) {
        SiteFinding l;
        l.site = {"train.py", uint32_t(100 + k), "step"};
        l.stack = {l.site};
        l.bytes_per_step = double(4096 * (60 - k));
        l.held.assign(100, 0);
        f.leaks.push_back(l);
        f.leak_bytes_per_step += l.bytes_per_step;
    }
    for (int k = 0; k < 2000; ++k)
        f.not_leaks.push_back({NotLeakKind::bounded_cache, uint64_t(1024 + k), "a cache", SourceLine{"cache.py", uint32_t(k), "f"}, 0});
    f.not_leaks.push_back({NotLeakKind::warm_up, 1 << 20, "warm-up", std::nullopt, 0});
    for (uint16_t d = 0; d < 20; ++d) {
        DeviceSummary s;
        s.device = d;
        s.timeline.assign(100, StepPoint{});
        f.devices.push_back(s);
        DevicePeak p;
        p.device = d;
        p.bytes = uint64_t(d + 1) << 30;
        p.categories[0] = p.bytes;
        f.peaks.push_back(p);
        DeviceLedger l;
        l.device = d;
        f.ledger.push_back(l);
    }
    return f;
}

size_t lines_of(const std::string& text) { return size_t(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

TEST(Summary, ManyEntriesShowTheLargestOfEachKindAndCountTheRest) {
    const Findings f = of_many_entries();
    const std::string out = render_summary(f, false);
    EXPECT_LE(lines_of(out), 120u) << out;
    EXPECT_NE(out.find("and 55 more leak sites, +"), std::string::npos) << out;
    // The rest are the smallest: 1,995 caches of 1,024 to 3,018 bytes.
    EXPECT_NE(out.find("and 1,995 more bounded-cache sites, " + format_bytes(double((1024 + 3018) * 1995 / 2)) +
                       " in all (--json lists them)"),
              std::string::npos) << out;
    EXPECT_NE(out.find("cache.py:1999"), std::string::npos) << "the largest cache is shown";
    EXPECT_EQ(out.find("cache.py:0 "), std::string::npos) << "the smallest is not";
    EXPECT_NE(out.find("warm-up"), std::string::npos) << "a kind under its cap is whole";
    EXPECT_NE(out.find("and 16 more devices (--json lists them)"), std::string::npos) << out;
    EXPECT_NE(out.find("cuda:19  20.0 GiB allocated"), std::string::npos) << "the highest peaks are shown";
    EXPECT_EQ(out.find("cuda:0  1.0 GiB allocated"), std::string::npos) << out;
}

TEST(Summary, TheFindingsJsonKeepsEveryEntryAndTheReportCountsWhatItLeavesOut) {
    const Findings f = of_many_entries();
    const auto at = [](const JsonValue& v, std::string_view key) -> const JsonValue& {
        const JsonValue* member = v.get(key);
        if (!member) throw std::runtime_error("no " + std::string(key));
        return *member;
    };
    const auto number = [](const JsonValue& v) { return std::stod(std::string(v.text)); };
    const std::string file = to_json(f), report = to_report_json({f}, {});
    const JsonValue all = parse_json(file, "findings", kMaxJsonDepth);
    EXPECT_EQ(at(all, "leaks").items.size(), 60u);
    EXPECT_EQ(at(all, "not_leaks").items.size(), 2001u);
    EXPECT_EQ(at(all, "peak").items.size(), 20u);
    EXPECT_EQ(all.get("not_shown"), nullptr);
    const JsonValue page = parse_json(report, "report", kMaxJsonDepth);
    const JsonValue& run = at(page, "runs").items.at(0);
    EXPECT_EQ(at(run, "leaks").items.size(), kReportShown.leaks);
    EXPECT_EQ(at(run, "not_leaks").items.size(), kReportShown.not_leaks_per_kind + 1);
    EXPECT_EQ(at(run, "devices").items.size(), kReportShown.devices);
    const JsonValue& rest = at(run, "not_shown");
    EXPECT_EQ(number(at(at(rest, "leaks"), "count")), 60.0 - double(kReportShown.leaks));
    EXPECT_EQ(number(at(at(rest, "not_leaks").items.at(0), "count")), 2000.0 - double(kReportShown.not_leaks_per_kind));
    EXPECT_EQ(number(at(rest, "devices")), 20.0 - double(kReportShown.devices));
}
