// Driver-level capture without a GPU: the memory calls' parameters decoded from fake structs, the
// live set that frees are matched against, the calling library found by unwinding through libc,
// NVML's figures from a fake NVML, and the recorder writing all of it into a trace read back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "capture/calling_library.h"
#include "capture/device_usage.h"
#include "capture/driver_calls.h"
#include "capture/recorder.h"
#include "trace/reader.h"
#include "temp_trace.h"

// The recorder reads Python frames through these; the test binary embeds no interpreter, so this
// stand-in says every thread has none (events still come, with their library frame alone).
namespace vramscope::capture {
bool python_frames_supported() { return false; }
size_t walk_python_frames(RawFrame*) { return 0; }
StackHasher hash_python_frames(FrameTrail&) { return {}; }
CodeInfo describe_code(const void*) { return {}; }
uint32_t line_of(const void*, int32_t) { return 0; }
std::string self_check() { return "no interpreter"; }
}  // namespace vramscope::capture

using namespace vramscope;
using namespace vramscope::capture;
namespace cabi = vramscope::capture::abi;  // "abi" alone is also the C++ runtime's

using vramscope::testing::temp_trace;

namespace {

// The innermost frame of an event's stack, as the trace holds it.
std::pair<std::string, std::string> innermost(const Trace& t, const Event& e) {
    const Frame& f = t.stacks.frame(t.stacks.node(e.stack).frame);
    return {std::string(t.stacks.string(f.file)), std::string(t.stacks.string(f.function))};
}

std::vector<Event> of_kinds(const Trace& t, std::initializer_list<EventKind> kinds) {
    std::vector<Event> out;
    for (const Event& e : t.events)
        if (std::find(kinds.begin(), kinds.end(), e.kind) != kinds.end()) out.push_back(e);
    return out;
}

}  // namespace

TEST(DriverCalls, EachShapeDecodesItsCallsParameters) {
    uint64_t dptr = 0x7f0000200000;
    cabi::MemAllocParams alloc{&dptr, 4096};
    DriverMemory m = decode(CallShape::device_alloc, &alloc);
    EXPECT_TRUE(m.allocated);
    EXPECT_EQ(m.space, Space::device);
    EXPECT_EQ(m.addr, dptr);
    EXPECT_EQ(m.size, 4096u);
    EXPECT_FALSE(m.pinned);
    EXPECT_EQ(m.device, -1);  // the calling context's

    size_t pitch = 512;
    cabi::MemAllocPitchParams pitched{&dptr, &pitch, 500, 30, 4};
    EXPECT_EQ(decode(CallShape::pitch_alloc, &pitched).size, 512u * 30);  // the pitch, not the width

    cabi::MemFreeParams freed{dptr};
    m = decode(CallShape::device_free, &freed);
    EXPECT_FALSE(m.allocated);
    EXPECT_EQ(m.addr, dptr);

    uint64_t handle = 17;
    cabi::MemAllocationProp on_device{0, 0, {cabi::kLocationDevice, 3}};
    cabi::MemCreateParams create{&handle, 2u << 20, &on_device, 0};
    m = decode(CallShape::handle_create, &create);
    EXPECT_EQ(m.space, Space::handle);
    EXPECT_EQ(m.addr, 17u);
    EXPECT_EQ(m.device, 3);  // the properties say where, whatever context is current
    EXPECT_FALSE(m.pinned);
    cabi::MemAllocationProp on_host{0, 0, {2, 0}};
    create.prop = &on_host;
    m = decode(CallShape::handle_create, &create);
    EXPECT_TRUE(m.pinned);
    EXPECT_EQ(m.device, -1);
    cabi::MemReleaseParams release{17};
    EXPECT_EQ(decode(CallShape::handle_release, &release).addr, 17u);
    cabi::MemMapParams whole{0x7f0000000000, 2u << 20, 0, 17, 0}, part{0x7f0000000000, 1u << 20, 1u << 20, 17, 0};
    m = decode(CallShape::handle_map, &whole);
    EXPECT_EQ(m.addr, 0x7f0000000000u);
    EXPECT_EQ(m.handle, 17u);
    EXPECT_EQ(decode(CallShape::handle_map, &part).handle, 0u);  // in part: the block stays the handle's

    char host[64];
    void* out = host;
    cabi::MemHostAllocParams host_alloc{&out, 64};
    m = decode(CallShape::host_alloc, &host_alloc);
    EXPECT_TRUE(m.pinned);
    EXPECT_EQ(m.space, Space::host);
    EXPECT_EQ(m.addr, uint64_t(reinterpret_cast<uintptr_t>(host)));
    cabi::MemHostRegisterParams reg{host, 64};
    EXPECT_EQ(decode(CallShape::host_register, &reg).size, 64u);
    cabi::MemHostPointerParams unreg{host};
    m = decode(CallShape::host_release, &unreg);
    EXPECT_FALSE(m.allocated);
    EXPECT_TRUE(m.pinned);
}

TEST(DriverCalls, EveryWatchedCallIsNamedOnce) {
    std::set<std::string_view> names;
    for (const WatchedCall& w : kWatchedCalls) EXPECT_TRUE(names.insert(w.name).second) << w.name;
    for (std::string_view must : {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemCreate", "cuMemRelease", "cuMemHostAlloc",
                                  "cuMemAllocHost_v2", "cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemFreeHost",
                                  "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocManaged", "cuMemAllocPitch_v2",
                                  "cuMemMap"})
        EXPECT_TRUE(names.count(must)) << must;
    EXPECT_FALSE(names.count("cuMemUnmap"));  // unmapping moves no physical memory
}

namespace {
CallingLibrary g_seen;
int compare_and_look(const void* a, const void* b) {
    g_seen = calling_library();
    return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}
}  // namespace

TEST(CallingLibrary, IsTheFirstObjectOutsideOursAndCudasOnTheStack) {
    // qsort calls back into this binary from libc: libc is the caller the comparator sees, as
    // NCCL is the caller a callback inside cuMemAlloc sees.
    int values[] = {3, 1, 2};
    std::qsort(values, 3, sizeof(int), compare_and_look);
    EXPECT_NE(g_seen.path.find("libc.so"), std::string::npos) << g_seen.path;
    EXPECT_EQ(g_seen.path.front(), '/');
    EXPECT_FALSE(g_seen.torch);

    EXPECT_TRUE(carries_driver_calls("/x/nvidia/cu13/lib/libcupti.so.13"));
    EXPECT_TRUE(carries_driver_calls("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    EXPECT_TRUE(carries_driver_calls("/x/libcudart.so.13"));
    EXPECT_FALSE(carries_driver_calls("/x/nvidia/nccl/lib/libnccl.so.2"));
    EXPECT_FALSE(carries_driver_calls("/x/libcudnn_graph.so.9"));
    EXPECT_TRUE(is_torch_library("/x/torch/lib/libc10_cuda.so"));
    EXPECT_TRUE(is_torch_library("/x/torch/lib/libtorch_cuda.so"));
    EXPECT_TRUE(is_torch_library("/x/torch/lib/libtorch.so"));
    EXPECT_FALSE(is_torch_library("/x/torch/lib/libtorch_python.so"));
    EXPECT_FALSE(is_torch_library("/x/nvidia/cu13/lib/libcublas.so.13"));
}

TEST(DriverCalls, TheRecorderWritesExternalMemoryUnderItsLibrarysFrame) {
    const std::string path = temp_trace("driver_events");
    const CallingLibrary nccl{"/x/nvidia/nccl/lib/libnccl.so.2", false};
    const CallingLibrary torch_cuda{"/x/torch/lib/libtorch_cuda.so", true};
    {
        Recorder r(path);
        ExternalBlocks blocks;
        uint64_t a = 0x7e0000000000, b = 0x7e0000400000;
        cabi::MemAllocParams pa{&a, 1 << 20}, pb{&b, 2 << 20};
        blocks.allocated(r, decode(CallShape::device_alloc, &pa), 1, nccl, "cuMemAlloc_v2");
        // torch's own segment: the allocator hook records it, so it is neither recorded nor kept.
        blocks.allocated(r, decode(CallShape::device_alloc, &pb), 1, torch_cuda, "cuMemAlloc_v2");
        EXPECT_EQ(blocks.live(), 1u);
        // torch's pinned host memory is recorded.
        char host[16];
        void* hp = host;
        cabi::MemHostAllocParams ph{&hp, 16};
        blocks.allocated(r, decode(CallShape::host_alloc, &ph), 0, torch_cuda, "cuMemHostAlloc");
        cabi::MemFreeParams fb{b};  // never seen allocated: no event
        blocks.freed(r, decode(CallShape::device_free, &fb));
        cabi::MemFreeParams fa{a};
        blocks.freed(r, decode(CallShape::device_free, &fa));
        cabi::MemHostPointerParams fh{host};
        blocks.freed(r, decode(CallShape::host_release, &fh));
        EXPECT_EQ(blocks.live(), 0u);
        // An address given out again while this set still holds it: the old block's free first.
        blocks.allocated(r, decode(CallShape::device_alloc, &pa), 1, nccl, "cuMemAlloc_v2");
        blocks.allocated(r, decode(CallShape::device_alloc, &pa), 1, nccl, "cuMemAllocAsync");
        r.close();
        EXPECT_EQ(r.fault(), "");
    }
    Trace t = read_trace(path);
    std::filesystem::remove(path);
    const auto events = of_kinds(t, {EventKind::external_alloc, EventKind::external_free, EventKind::pinned_alloc,
                                     EventKind::pinned_free});
    ASSERT_EQ(events.size(), 7u);
    const EventKind kinds[] = {EventKind::external_alloc, EventKind::pinned_alloc, EventKind::external_free,
                               EventKind::pinned_free,    EventKind::external_alloc, EventKind::external_free,
                               EventKind::external_alloc};
    for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].kind, kinds[i]) << i;
    EXPECT_EQ(events[0].device, 1);
    EXPECT_EQ(events[0].size, 1u << 20);
    EXPECT_EQ(innermost(t, events[0]), std::make_pair(nccl.path, std::string("cuMemAlloc_v2")));
    EXPECT_EQ(t.stacks.frame(t.stacks.node(events[0].stack).frame).line, 0u);
    EXPECT_EQ(innermost(t, events[1]), std::make_pair(torch_cuda.path, std::string("cuMemHostAlloc")));
    EXPECT_EQ(events[2].size, 1u << 20);  // a free carries the size allocated
    EXPECT_EQ(events[2].device, 1);
    EXPECT_EQ(events[3].size, 16u);
    EXPECT_EQ(innermost(t, events[6]).second, "cuMemAllocAsync");
}

TEST(DriverCalls, AHandleMappedWholeIsFoundAtItsAddressAndFreedThereOnRelease) {
    const std::string path = temp_trace("driver_map");
    const CallingLibrary xla{"/x/jax_plugins/xla_cuda12/xla_cuda_plugin.so", false};
    const uint64_t at = 0x7f0000000000;
    {
        Recorder r(path);
        ExternalBlocks blocks;
        uint64_t h1 = 17, h2 = 18;
        cabi::MemCreateParams c1{&h1, 2u << 20, nullptr, 0}, c2{&h2, 2u << 20, nullptr, 0};
        blocks.allocated(r, decode(CallShape::handle_create, &c1), 0, xla, "cuMemCreate");
        blocks.allocated(r, decode(CallShape::handle_create, &c2), 0, xla, "cuMemCreate");
        cabi::MemMapParams whole{at, 2u << 20, 0, 17, 0}, part{at + (4u << 20), 1u << 20, 0, 18, 0};
        blocks.mapped(r, decode(CallShape::handle_map, &whole), xla);
        blocks.mapped(r, decode(CallShape::handle_map, &part), xla);  // in part: known by its handle still
        EXPECT_EQ(blocks.live(), 2u);
        cabi::MemReleaseParams r1{17}, r2{18};
        blocks.freed(r, decode(CallShape::handle_release, &r1));
        blocks.freed(r, decode(CallShape::handle_release, &r2));
        EXPECT_EQ(blocks.live(), 0u);
        r.close();
        EXPECT_EQ(r.fault(), "");
    }
    Trace t = read_trace(path);
    std::filesystem::remove(path);
    const auto events = of_kinds(t, {EventKind::external_alloc, EventKind::external_free});
    ASSERT_EQ(events.size(), 6u);
    const std::pair<EventKind, uint64_t> want[] = {
        {EventKind::external_alloc, 17}, {EventKind::external_alloc, 18}, {EventKind::external_free, 17},
        {EventKind::external_alloc, at}, {EventKind::external_free, at},  {EventKind::external_free, 18}};
    for (size_t i = 0; i < events.size(); ++i) {
        EXPECT_EQ(events[i].kind, want[i].first) << i;
        EXPECT_EQ(events[i].addr, want[i].second) << i;
        EXPECT_EQ(events[i].size, 2u << 20) << i;
    }
    EXPECT_EQ(innermost(t, events[3]), std::make_pair(xla.path, std::string("cuMemCreate")));
}

// A fake NVML: the processes each call lists, and how often it was asked.
namespace {
std::vector<cabi::NvmlProcessInfo> g_listed;
int g_asked = 0;
cabi::NvmlDevice g_device = reinterpret_cast<cabi::NvmlDevice>(0x1000);

cabi::NvmlReturn fake_handle(const char* bus, cabi::NvmlDevice* out) {
    if (std::string(bus) != "00000000:00:06.0") return 6;  // NVML_ERROR_NOT_FOUND
    *out = g_device;
    return cabi::kNvmlSuccess;
}
std::chrono::milliseconds g_nvml_takes{0};  // how long the fake NVML takes to answer
cabi::NvmlReturn fake_processes(cabi::NvmlDevice, unsigned* count, cabi::NvmlProcessInfo* infos) {
    ++g_asked;
    std::this_thread::sleep_for(g_nvml_takes);
    const unsigned room = *count;
    *count = unsigned(g_listed.size());
    if (room < g_listed.size()) return cabi::kNvmlInsufficientSize;
    std::copy(g_listed.begin(), g_listed.end(), infos);
    return cabi::kNvmlSuccess;
}
const char* fake_error(cabi::NvmlReturn r) { return r == 6 ? "Not Found" : "Unknown Error"; }
const NvmlApi kFakeNvml{fake_handle, fake_processes, fake_error};
constexpr unsigned kPid = 4242;
}  // namespace

TEST(DeviceUsage, ReadsThisProcessByPciBusIdAtMostOnceEvery20ms) {
    g_listed = {{1, 5u << 20, 0, 0}, {kPid, 700u << 20, 0, 0}};
    DeviceUsage usage(kFakeNvml, kPid);
    EXPECT_NE(usage.watch(1, "00000000:00:07.0").find("Not Found"), std::string::npos);
    EXPECT_EQ(usage.state().rfind("off: cuda:1", 0), 0u) << usage.state();
    EXPECT_EQ(usage.watch(0, "00000000:00:06.0"), "");
    EXPECT_EQ(usage.state(), "on");
    const auto t0 = DeviceUsage::Clock::now();
    auto read = usage.read(t0, false);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].device, 0);
    EXPECT_EQ(read[0].bytes, 700u << 20);
    g_asked = 0;
    EXPECT_TRUE(usage.read(t0 + std::chrono::milliseconds(5), false).empty());
    EXPECT_EQ(g_asked, 0);  // NVML not asked at all
    EXPECT_EQ(usage.read(t0 + std::chrono::milliseconds(5), true).size(), 1u);  // start and end read always
    EXPECT_EQ(usage.read(t0 + std::chrono::milliseconds(30), false).size(), 1u);
    // A list longer than the first guess of room is asked again with more.
    g_listed.assign(40, cabi::NvmlProcessInfo{7, 1, 0, 0});
    g_listed.push_back({kPid, 900u << 20, 0, 0});
    read = usage.read(t0 + std::chrono::seconds(1), false);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].bytes, 900u << 20);
}

// NVML is read from the training thread: slow answers space the reads, so that they take a
// thousandth of the run's time at most; one slow answer among quick ones does not.
TEST(DeviceUsage, SlowReadsAreFollowedByTheNextNoSoonerThanAThousandTimesTheirCost) {
    g_listed = {{kPid, 700u << 20, 0, 0}};
    DeviceUsage usage(kFakeNvml, kPid);
    EXPECT_EQ(usage.watch(0, "00000000:00:06.0"), "");
    const auto t0 = DeviceUsage::Clock::now();
    g_nvml_takes = std::chrono::milliseconds(2);
    for (size_t i = 0; i < DeviceUsage::kCosts; ++i) EXPECT_EQ(usage.read(t0, true).size(), 1u);
    g_nvml_takes = std::chrono::milliseconds(0);
    EXPECT_TRUE(usage.read(t0 + std::chrono::seconds(1), false).empty());  // 2 ms a read: one per 2 s at most
    EXPECT_EQ(usage.read(t0 + std::chrono::seconds(10), false).size(), 1u);
    for (size_t i = 1; i < DeviceUsage::kCosts; ++i) EXPECT_EQ(usage.read(t0 + std::chrono::seconds(10), true).size(), 1u);
    g_nvml_takes = std::chrono::milliseconds(2);  // one slow read among quick ones: preempted, say
    EXPECT_EQ(usage.read(t0 + std::chrono::seconds(10), true).size(), 1u);
    g_nvml_takes = std::chrono::milliseconds(0);
    EXPECT_EQ(usage.read(t0 + std::chrono::seconds(11), false).size(), 1u);  // 1 s later: due again
}

TEST(DeviceUsage, AnotherPidNamespaceIsReadOnlyWhileTheDeviceRunsOneProcess) {
    g_listed = {{99999, 300u << 20, 0, 0}};  // the host's pid for this process
    DeviceUsage usage(kFakeNvml, kPid);
    EXPECT_EQ(usage.watch(0, "00000000:00:06.0"), "");
    EXPECT_EQ(usage.state(), "on (device total: one process)");
    const auto t0 = DeviceUsage::Clock::now();
    EXPECT_EQ(usage.read(t0, true).at(0).bytes, 300u << 20);
    g_listed.push_back({88888, 1, 0, 0});  // a second process: which is ours cannot be told
    EXPECT_TRUE(usage.read(t0, true).empty());

}

// A shared GPU (other jobs, MPS, a notebook) where NVML does not list this process yet as the device
// is first watched (its context just made): the device is watched, and this process found at each
// read, by its pid, once it is listed; another job's figure is never taken for its own.
TEST(DeviceUsage, OnASharedGpuThisProcessIsFoundAtEachReadOnceNvmlListsIt) {
    g_listed = {{1111, 500u << 20, 0, 0}, {2222, 600u << 20, 0, 0}};
    DeviceUsage usage(kFakeNvml, kPid);
    EXPECT_EQ(usage.watch(0, "00000000:00:06.0"), "");
    EXPECT_NE(usage.state().find("on (not listed yet: cuda:0: NVML lists 2 compute processes, not this one (pid 4242): read once it does)"),
              std::string::npos) << usage.state();
    const auto t0 = DeviceUsage::Clock::now();
    EXPECT_TRUE(usage.read(t0, true).empty());
    g_listed.push_back({kPid, 300u << 20, 0, 0});
    EXPECT_EQ(usage.read(t0, true).at(0).bytes, 300u << 20);
    EXPECT_EQ(usage.state(), "on");
    g_listed = {{1111, 500u << 20, 0, 0}};  // this process gone from the list, one other left
    EXPECT_TRUE(usage.read(t0, true).empty());  // never the other job's figure
}

// A trace's NVML figures and step markers in order (a marker as 0), the trace removed.
static std::vector<std::pair<EventKind, uint64_t>> figures_and_steps(const std::string& path) {
    Trace t = read_trace(path);
    std::filesystem::remove(path);
    std::vector<std::pair<EventKind, uint64_t>> seen;
    for (const Event& e : of_kinds(t, {EventKind::device_usage, EventKind::step}))
        seen.emplace_back(e.kind, e.kind == EventKind::device_usage ? e.size : 0);
    return seen;
}

TEST(DeviceUsage, TheRecorderWritesTheFiguresAtWatchBeforeEachStepMarkerAndAtTheEnd) {
    g_listed = {{kPid, 100u << 20, 0, 0}};
    const std::string path = temp_trace("device_usage");
    {
        Recorder r(path);
        r.allocator_event(EventKind::alloc, 0, 0x1000, 512, 0, nullptr);  // a process that allocated keeps its trace
        EXPECT_EQ(r.usage_state().rfind("off: ", 0), 0u);
        r.use_device_usage(std::make_unique<DeviceUsage>(kFakeNvml, kPid));
        EXPECT_EQ(r.watch_device(0, "00000000:00:06.0"), "");
        EXPECT_EQ(r.usage_state(), "on");
        g_listed[0].usedGpuMemory = 200u << 20;
        std::this_thread::sleep_for(DeviceUsage::kMinInterval + std::chrono::milliseconds(5));
        r.end_step("optimizer step");
        r.end_step("optimizer step");  // at once: no read
        g_listed[0].usedGpuMemory = 300u << 20;
        r.close();
    }
    const auto seen = figures_and_steps(path);
    const std::vector<std::pair<EventKind, uint64_t>> expected = {
        {EventKind::device_usage, 100u << 20}, {EventKind::device_usage, 200u << 20}, {EventKind::step, 0},
        {EventKind::step, 0}, {EventKind::device_usage, 300u << 20}};
    EXPECT_EQ(seen, expected);
}

// What a recorder reading the fake NVML (100 MiB as device 0 is watched), asked to read at step
// ends first..last, wrote as `run` drove it: the figures and the step markers.
template <class Run>
static std::vector<std::pair<EventKind, uint64_t>> asked_reads(const char* name, uint64_t first, uint64_t last, Run run) {
    g_listed = {{kPid, 100u << 20, 0, 0}};
    const std::string path = temp_trace(name);
    {
        Recorder r(path);
        r.use_device_usage(std::make_unique<DeviceUsage>(kFakeNvml, kPid));
        r.read_usage_at_step_ends(first, last);
        EXPECT_EQ(r.watch_device(0, "00000000:00:06.0"), "");
        run(r);
        r.close();
    }
    return figures_and_steps(path);
}

// The usage ledger's context is read at the end of warm-up: the step ends asked for read NVML even
// when the steps are too short for a read to be due, so that no earlier reading stands in for it.
TEST(DeviceUsage, TheStepEndsAskedForReadWhetherDueOrNot) {
    const auto seen = asked_reads("first_steps", 1, 2, [](Recorder& r) {
        r.allocator_event(EventKind::alloc, 0, 0x1000, 512, 0, nullptr);
        for (uint64_t mib : {200, 300, 400, 500, 600}) {  // five step ends at once, NVML's figure growing
            g_listed[0].usedGpuMemory = mib << 20;
            r.end_step("optimizer step");
        }
    });
    const std::vector<std::pair<EventKind, uint64_t>> expected = {
        {EventKind::device_usage, 100u << 20},  // as the device is watched
        {EventKind::step, 0},                   // step 0: not due, not asked for
        {EventKind::device_usage, 300u << 20}, {EventKind::step, 0},  // 1 and 2: asked for
        {EventKind::device_usage, 400u << 20}, {EventKind::step, 0},
        {EventKind::step, 0},                  {EventKind::step, 0},  // 3 and 4: neither
        {EventKind::device_usage, 600u << 20}};                       // at close
    EXPECT_EQ(seen, expected);
}

// The analysis forgets the step ends that no memory event precedes, so the step ends asked for are
// counted from the first one after memory: a run that ends steps before it allocates (a loop that
// moves its model to the GPU late) still has its context read where its warm-up ends.
TEST(DeviceUsage, TheStepEndsAskedForAreCountedFromTheFirstMemory) {
    const auto seen = asked_reads("steps_before_memory", 1, 1, [](Recorder& r) {
        for (uint64_t mib : {150, 160}) {  // two step ends before any memory: the analysis forgets them
            g_listed[0].usedGpuMemory = mib << 20;
            r.end_step("optimizer step");
        }
        r.allocator_event(EventKind::alloc, 0, 0x1000, 512, 0, nullptr);
        for (uint64_t mib : {200, 300, 400}) {  // the analysis's steps 0, 1 and 2
            g_listed[0].usedGpuMemory = mib << 20;
            r.end_step("optimizer step");
        }
    });
    const std::vector<std::pair<EventKind, uint64_t>> expected = {
        {EventKind::device_usage, 100u << 20},  // as the device is watched
        {EventKind::step, 0}, {EventKind::step, 0},  // before memory
        {EventKind::step, 0},                        // step 0: not asked for
        {EventKind::device_usage, 300u << 20}, {EventKind::step, 0},  // step 1: asked for
        {EventKind::step, 0},                                         // step 2
        {EventKind::device_usage, 400u << 20}};                       // at close
    EXPECT_EQ(seen, expected);
}

// Step ends before any memory are forgotten by the analysis, readings and all: none is forced there
// (a run that ends many steps before it allocates would read NVML at each).
TEST(DeviceUsage, NoStepEndBeforeMemoryIsAskedToRead) {
    const auto seen = asked_reads("no_reads_before_memory", 0, 3, [](Recorder& r) {
        for (int i = 0; i < 10; ++i) r.end_step("optimizer step");  // at once: none due
        r.allocator_event(EventKind::alloc, 0, 0x1000, 512, 0, nullptr);
        g_listed[0].usedGpuMemory = 200u << 20;
        r.end_step("optimizer step");  // the analysis's step 0: asked for
    });
    std::vector<std::pair<EventKind, uint64_t>> expected = {{EventKind::device_usage, 100u << 20}};
    expected.insert(expected.end(), 10, {EventKind::step, 0});
    expected.insert(expected.end(), {{EventKind::device_usage, 200u << 20}, {EventKind::step, 0},
                                     {EventKind::device_usage, 200u << 20}});
    EXPECT_EQ(seen, expected);
}
