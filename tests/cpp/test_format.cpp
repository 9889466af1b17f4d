#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>
#include <fstream>

#include "common/file.h"
#include "common/inflate.h"
#include "trace/format.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "temp_trace.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

using vramscope::testing::temp_trace;

namespace {

Trace sample_trace(int steps) {
    TraceBuilder b;
    b.t.meta["torch"] = "2.11.0";
    b.t.devices[0].total_memory = 80ull << 30;
    b.t.devices[0].baseline_allocated = 12345 * 512;
    const uint32_t fwd = b.stack({{"train.py", 10, "forward"}, {"train.py", 40, "main"}});
    const uint32_t leak = b.stack({{"train.py", 22, "stash"}, {"train.py", 40, "main"}});
    b.segment(0x7f0000000000, 20 << 20);
    for (int s = 0; s < steps; ++s) {
        b.alloc(0x7f0000000000, 4096, fwd);
        b.alloc(0x7f0000001000 + 512 * uint64_t(s), 512, leak, 0x5555);
        b.alloc(0x7f0000100003, 1000, fwd);  // unaligned address and size take the long form
        b.free(0x7f0000100003, 1000);
        b.free(0x7f0000000000, 4096);
        b.step();
    }
    return b.t;
}

void expect_same_events(const Trace& a, const Trace& b) {
    ASSERT_EQ(a.events.size(), b.events.size());
    for (size_t i = 0; i < a.events.size(); ++i) {
        const Event &x = a.events[i], &y = b.events[i];
        ASSERT_EQ(x.kind, y.kind) << i;
        ASSERT_EQ(x.addr, y.addr) << i;
        ASSERT_EQ(x.size, y.size) << i;
        ASSERT_EQ(a.streams[x.stream], b.streams[y.stream]) << i;
        ASSERT_EQ(x.time_us, y.time_us) << i;
        ASSERT_EQ(x.device, y.device) << i;
        if (x.kind == EventKind::alloc) {
            ASSERT_EQ(a.stacks.frames_of(x.stack).size(), b.stacks.frames_of(y.stack).size());
            const Frame& fx = a.stacks.frame(a.stacks.node(x.stack).frame);
            const Frame& fy = b.stacks.frame(b.stacks.node(y.stack).frame);
            ASSERT_EQ(a.stacks.string(fx.file), b.stacks.string(fy.file));
            ASSERT_EQ(fx.line, fy.line);
        }
    }
}

}  // namespace

TEST(TraceFormat, TheChunkChecksumIsZlibsCrc32) {
    // Whichever library computes it (ISA-L's where built with it): files from either build read in the other.
    std::string data;
    for (uint32_t i = 0; i < 70000; ++i) data.push_back(char(i * 2654435761u >> 24));
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    for (size_t from : {0, 1, 3, 7})
        for (size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 255, 4096, 65537})
            EXPECT_EQ(crc32_of(p + from, n), uint32_t(crc32(0, p + from, uInt(n)))) << from << " " << n;
}

TEST(TraceFormat, RoundTripKeepsEveryEventAndTheHeader) {
    Trace t = sample_trace(50);
    const std::string path = temp_trace("roundtrip");
    write_trace(t, path);
    Trace back = read_trace(path);
    EXPECT_TRUE(back.warnings.empty());
    expect_same_events(t, back);
    EXPECT_EQ(back.meta["torch"], "2.11.0");
    ASSERT_EQ(back.devices.size(), 1u);
    EXPECT_EQ(back.devices[0].total_memory, 80ull << 30);
    EXPECT_EQ(back.devices[0].baseline_allocated, 12345u * 512);
    std::remove(path.c_str());
}

TEST(TraceFormat, SmallChunksRoundTrip) {
    Trace t = sample_trace(200);
    const std::string path = temp_trace("smallchunks");
    write_trace(t, path, 64);  // a chunk every few records: per-chunk state resets are exercised
    expect_same_events(t, read_trace(path));
    std::remove(path.c_str());
}

// Memory outside torch's allocator and NVML's figure (version 3): every kind, at unaligned
// addresses and sizes, among torch's events and on two devices, with each stack's library frame.
TEST(TraceFormat, EveryKindOfMemoryOutsideTorchRoundTrips) {
    TraceBuilder builder;
    builder.t = sample_trace(40);
    const uint32_t library = builder.stack({{"/usr/lib/libnccl.so.2", 0, "cuMemAlloc_v2"}, {"train.py", 7, "main"}});
    const uint32_t host = builder.stack({{"<unknown library>", 0, "cuMemHostAlloc"}, {"train.py", 8, "main"}});
    Trace& t = builder.t;
    std::vector<Event> events;
    int64_t time = 1 << 20;
    auto add = [&](EventKind kind, uint64_t addr, uint64_t size, uint32_t stack, uint8_t device) {
        Event e;
        e.kind = kind, e.addr = addr, e.size = size, e.stack = stack, e.device = device, e.time_us = time += 5;
        events.push_back(e);
    };
    for (uint64_t s = 0; s < 40; ++s) {
        const auto device = uint8_t(s % 2);
        add(EventKind::external_alloc, 0x7f10'0000'0003 + s * 0x10'0000, 1000 + s, library, device);
        add(EventKind::pinned_alloc, 0x5555'0000'0000 + s * 8192, 4096 * s + 7, host, device);
        add(EventKind::device_usage, 0, (uint64_t(40) << 30) + s * 12345, 0, device);
        if (s > 0) add(EventKind::external_free, 0x7f10'0000'0003 + (s - 1) * 0x10'0000, 999 + s, 0, uint8_t((s - 1) % 2));
        if (s > 0) add(EventKind::pinned_free, 0x5555'0000'0000 + (s - 1) * 8192, 4096 * (s - 1) + 7, 0, uint8_t((s - 1) % 2));
        // A library pool's reading (version 4): its name, its pool's bytes and those in use, any value.
        add(EventKind::pool_usage, (uint64_t(1) << 40) + s * 1001, (s * 16 << 20) + 3, 0, device);
        events.back().name = t.stacks.intern_string(s % 3 ? "JAX/XLA" : "CuPy");
    }
    // Interleaved with torch's: each new event after every second of the sample's.
    std::vector<Event> mixed;
    for (size_t i = 0, j = 0; i < t.events.size() || j < events.size();) {
        if (i < t.events.size()) mixed.push_back(t.events[i++]);
        if (j < events.size() && i % 2 == 0) mixed.push_back(events[j++]);
        else if (i >= t.events.size()) mixed.push_back(events[j++]);
    }
    t.events = std::move(mixed);
    for (const size_t chunk : {size_t(64), size_t(64 * 1024)}) {
        const std::string path = temp_trace("external");
        write_trace(t, path, chunk);
        const Trace back = read_trace(path);
        std::remove(path.c_str());
        EXPECT_TRUE(back.warnings.empty() && back.faults.empty());
        expect_same_events(t, back);
        for (size_t i = 0; i < t.events.size(); ++i) {
            if (is_pool_reading(t.events[i].kind)) EXPECT_EQ(t.stacks.string(t.events[i].name), back.stacks.string(back.events[i].name)) << i;
            if (!is_external_alloc(t.events[i].kind)) continue;
            const std::vector<uint32_t> a = t.stacks.frames_of(t.events[i].stack), b = back.stacks.frames_of(back.events[i].stack);
            ASSERT_EQ(a.size(), b.size()) << i;
            for (size_t k = 0; k < a.size(); ++k) {
                const Frame &x = t.stacks.frame(a[k]), &y = back.stacks.frame(b[k]);
                EXPECT_EQ(t.stacks.string(x.file), back.stacks.string(y.file));
                EXPECT_EQ(t.stacks.string(x.function), back.stacks.string(y.function));
                EXPECT_EQ(x.line, y.line);
            }
        }
    }
}

// Every kind has one tag and back; the 5 bits of a tag hold no more kinds (31, pool_usage, is the last).
TEST(TraceFormat, EachKindHasOneTagAndNoTagNamesAKindThatIsNot) {
    for (int kind = 0; kind < kEventKindCount; ++kind) EXPECT_EQ(format::kind_of_tag(format::tag_of_kind(uint8_t(kind))), kind);
    for (int tag = 0; tag < 32; ++tag) {
        const int kind = format::kind_of_tag(uint8_t(tag));
        EXPECT_LT(kind, kEventKindCount) << tag;
        if (kind >= 0) EXPECT_EQ(format::tag_of_kind(uint8_t(kind)), tag);
    }
    EXPECT_EQ(format::kind_of_tag(31), int(EventKind::pool_usage));
}

// A pool reading came with version 4: in a version-3 file its tag is damage; a version-3 file
// without one still reads.
TEST(TraceFormat, APoolReadingIsDamageInAVersion3File) {
    TraceBuilder b;
    b.step();
    b.pool("JAX/XLA", 16 << 20, 34 << 20);
    const std::string path = temp_trace("v3_pool");
    write_trace(b.t, path);
    const Bytes file = read_file(path);
    std::remove(path.c_str());
    std::string bytes(file.begin(), file.end());
    const Trace v4 = parse_trace(bytes, "v4.vscope");
    ASSERT_EQ(v4.events.size(), 2u);
    EXPECT_EQ(v4.events[1].kind, EventKind::pool_usage);
    EXPECT_EQ(v4.events[1].size, 16u << 20);
    EXPECT_EQ(v4.events[1].addr, 34u << 20);
    EXPECT_EQ(v4.stacks.string(v4.events[1].name), "JAX/XLA");
    bytes[8] = 3;
    const Trace v3 = parse_trace(bytes, "v3.vscope");
    ASSERT_EQ(v3.faults.size(), 1u);
    EXPECT_NE(v3.faults[0].find("unknown record tag"), std::string::npos) << v3.faults[0];
    TraceBuilder old;
    old.step();
    write_trace(old.t, path);
    const Bytes plain = read_file(path);
    std::remove(path.c_str());
    std::string v3_bytes(plain.begin(), plain.end());
    v3_bytes[8] = 3;
    const Trace read_back = parse_trace(v3_bytes, "v3.vscope");
    EXPECT_TRUE(read_back.faults.empty());
    EXPECT_EQ(read_back.events.size(), 1u);
}

// Their tags came with version 3: in a file that says version 2 they are damage, not events.
TEST(TraceFormat, TheTagsOfVersion3AreDamageInAnOlderFile) {
    TraceBuilder b;
    b.step();
    Event e;
    e.kind = EventKind::device_usage;
    e.size = 1 << 30;
    e.time_us = 2000;
    b.t.events.push_back(e);
    const std::string path = temp_trace("v2_later_tag");
    write_trace(b.t, path);
    const Bytes file = read_file(path);
    std::remove(path.c_str());
    std::string bytes(file.begin(), file.end());
    EXPECT_EQ(parse_trace(bytes, "v3.vscope").events.size(), 2u);
    bytes[8] = 2;  // the header is not in any chunk's checksum
    const Trace back = parse_trace(bytes, "v2.vscope");
    ASSERT_EQ(back.faults.size(), 1u);
    EXPECT_NE(back.faults[0].find("unknown record tag"), std::string::npos) << back.faults[0];
}

TEST(TraceFormat, AFreeRequestedAndCompletedAtOnceReadsBackAsOneFree) {
    TraceBuilder b;
    const uint32_t st = b.stack({{"train.py", 1, "f"}});
    b.alloc(0x10000, 512, st);
    b.free_later(0x10000, 512);
    b.t.events.back().time_us = b.t.events[b.t.events.size() - 2].time_us;  // completed at once
    b.alloc(0x20000, 1024, st);
    b.free_later(0x20000, 1024);  // completed 3 µs later: stays two events
    const std::string path = temp_trace("frees");
    write_trace(b.t, path);
    Trace back = read_trace(path);
    std::remove(path.c_str());
    ASSERT_EQ(back.events.size(), 5u);
    EXPECT_EQ(back.events[1].kind, EventKind::free);
    EXPECT_EQ(back.events[1].size, 512u);
    EXPECT_EQ(back.events[3].kind, EventKind::free_requested);
    EXPECT_EQ(back.events[4].kind, EventKind::free_completed);
    EXPECT_EQ(back.events[4].time_us, back.events[3].time_us + 3);
}

TEST(TraceFormat, CutAtEveryByteReadsBackWholeChunksWithAWarning) {
    Trace t = sample_trace(30);
    const std::string path = temp_trace("cut");
    write_trace(t, path, 256);
    const Bytes file = read_file(path);
    const std::string whole(file.begin(), file.end());
    std::remove(path.c_str());
    std::set<size_t> chunk_ends = {12};
    for (size_t off = 12; off + 12 <= whole.size();) {
        uint32_t len;
        std::memcpy(&len, whole.data() + off + 4, 4);
        off += 12 + len;
        chunk_ends.insert(off);
    }
    size_t previous = 0;
    for (size_t n = 0; n <= whole.size(); ++n) {
        const std::string cut = whole.substr(0, n);
        if (n < 12) {
            EXPECT_THROW(parse_trace(cut, "cut.vscope"), std::runtime_error) << n;
            continue;
        }
        Trace back = parse_trace(cut, "cut.vscope");
        // Whatever was read is an exact prefix of the original, and it never shrinks as the cut moves on.
        ASSERT_LE(back.events.size(), t.events.size());
        ASSERT_GE(back.events.size(), previous) << n;
        previous = back.events.size();
        for (size_t i = 0; i < back.events.size(); ++i) {
            ASSERT_EQ(back.events[i].addr, t.events[i].addr);
            ASSERT_EQ(back.events[i].kind, t.events[i].kind);
        }
        // A cut is a warning, never a fault: the chunks before it are trustworthy. At a chunk
        // boundary only the missing end record tells.
        ASSERT_TRUE(back.faults.empty()) << n;
        ASSERT_EQ(back.warnings.size(), n == whole.size() ? 0u : 1u) << n;
        if (!back.warnings.empty())
            EXPECT_NE(back.warnings[0].find(chunk_ends.count(n) ? "no end record" : "cut.vscope: offset "), std::string::npos) << n;
    }
    EXPECT_EQ(previous, t.events.size());
}

TEST(TraceFormat, CorruptChunkStopsWithAFaultNamingTheOffset) {
    Trace t = sample_trace(100);
    const std::string path = temp_trace("corrupt");
    write_trace(t, path);
    const Bytes file = read_file(path);
    std::string bytes(file.begin(), file.end());
    std::remove(path.c_str());
    bytes[bytes.size() / 2] ^= 0x5a;
    Trace back = parse_trace(bytes, "corrupt.vscope");
    EXPECT_TRUE(back.warnings.empty());
    ASSERT_EQ(back.faults.size(), 1u);
    EXPECT_NE(back.faults[0].find("checksum"), std::string::npos);
    EXPECT_NE(back.faults[0].find("corrupt.vscope: offset "), std::string::npos);
    EXPECT_LT(back.events.size(), t.events.size());
}

TEST(TraceFormat, RejectsOtherFilesAndNewerVersions) {
    EXPECT_THROW(parse_trace("not a trace at all", "x"), std::runtime_error);
    std::string header("\x89VSCOPE\n\x09\x00\x00\x00", 12);
    try {
        parse_trace(header, "future.vscope");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("version 9"), std::string::npos);
    }
}

TEST(TraceFormat, ThreadsWritingAtOnceLoseNothing) {
    const std::string path = temp_trace("threads");
    constexpr int kThreads = 4, kEach = 20000;
    {
        TraceWriter w(path, 4096);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
            threads.emplace_back([&w, t] {
                const uint32_t frame = w.intern_frame("worker.py", uint32_t(t + 1), "work");
                const uint32_t stack = w.intern_stack(&frame, 1);
                const uint16_t stream = w.intern_stream(0x1000 + uint64_t(t));
                for (int i = 0; i < kEach; ++i) {
                    Event e;
                    e.kind = EventKind::alloc;
                    e.addr = (uint64_t(t) << 40) + uint64_t(i) * 512;
                    e.size = 512;
                    e.stack = stack;
                    e.stream = stream;
                    e.time_us = i;
                    w.event(e);
                }
            });
        for (auto& th : threads) th.join();
    }
    Trace back = read_trace(path);
    std::remove(path.c_str());
    EXPECT_TRUE(back.warnings.empty());
    ASSERT_EQ(back.events.size(), size_t(kThreads) * kEach);
    std::vector<int> per_thread(kThreads, 0);
    for (const Event& e : back.events) {
        const int t = int(e.addr >> 40);
        ASSERT_LT(t, kThreads);
        EXPECT_EQ(back.streams[e.stream], 0x1000 + uint64_t(t));
        EXPECT_EQ(back.stacks.frame(back.stacks.node(e.stack).frame).line, uint32_t(t + 1));
        ++per_thread[t];
    }
    for (int n : per_thread) EXPECT_EQ(n, kEach);
}

TEST(TraceFormat, WriterReportsAnUnwritablePath) {
    EXPECT_THROW(TraceWriter("/nonexistent-dir/x.vscope"), std::runtime_error);
}
