// Writes a synthetic training run as a .vscope trace, for the streaming analysis's figures
// (docs/benchmarks.md), in one pass and a few MiB however long the run:
//   gen_trace OUT.vscope STEPS EVENTS_PER_STEP [STACKS [KEEP]]
// Each step: temporaries allocated and freed within it (events in pairs, as a `free` at one
// instant), parameters before the loop, one site leaking 4 KiB a step, an LRU cache of 16 entries,
// and a step marker. STACKS (default 64) spreads the temporaries over that many distinct stacks;
// KEEP (default 0) keeps each temporary KEEP steps before its free: with KEEP 2 every one
// survives its step, and with STACKS large every stack is a site with a series (the many-sites
// case the fuzzing found: 300,000 stacks over 300 steps).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trace/writer.h"

using namespace vramscope;

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: gen_trace OUT.vscope STEPS EVENTS_PER_STEP [STACKS]\n");
        return 2;
    }
    const uint64_t steps = std::strtoull(argv[2], nullptr, 10), per_step = std::strtoull(argv[3], nullptr, 10);
    const uint64_t stacks = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 64;
    const uint64_t keep = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 0;
    TraceWriter w(argv[1], 1 << 20);
    w.meta("generator", "bench/gen_trace");
    w.device(DeviceInfo{0, 80ull << 30, 0, 0});
    auto stack = [&](const std::string& file, uint32_t line, const char* fn) {
        const uint32_t frames[2] = {w.intern_frame(file, line, fn), w.intern_frame("/home/u/train.py", 40, "main")};
        return w.intern_stack(frames, 2);
    };
    const uint32_t params = stack("/home/u/model.py", 10, "build");
    const uint32_t leak = stack("/home/u/train.py", 55, "train_step");
    const uint32_t cache = stack("/home/u/cache.py", 8, "remember");
    std::vector<uint32_t> temp;
    for (uint64_t k = 0; k < stacks; ++k) temp.push_back(stack("/home/u/layers.py", uint32_t(100 + k), "forward"));
    int64_t time = 1'700'000'000'000'000;
    auto emit = [&](EventKind kind, uint64_t addr, uint64_t size, uint32_t st) {
        Event e;
        e.kind = kind;
        e.addr = addr;
        e.size = size;
        e.stack = st;
        e.time_us = ++time;
        w.event(e);
    };
    emit(EventKind::segment_alloc, 0x7f0000000000, 64ull << 30, 0);
    emit(EventKind::alloc, 0x7f0000000000, 1ull << 30, params);
    uint64_t events = 2;
    const uint64_t pairs = per_step > 4 ? (per_step - 4) / 2 : 1;
    for (uint64_t s = 0; s < steps; ++s) {
        for (uint64_t i = 0; i < pairs; ++i) {
            const uint64_t size = 4096 * (1 + i % 64);
            if (!keep) {
                const uint64_t addr = 0x7f0040000000 + (i % 256) * 0x100000;
                emit(EventKind::alloc, addr, size, temp[(s * pairs + i) % stacks]);
                emit(EventKind::free, addr, size, 0);
                continue;
            }
            // Slot (step mod KEEP + 1, i): freed KEEP steps later, just before its slot is reused.
            const uint64_t addr = 0x100000000000 + ((s % (keep + 1)) * pairs + i) * 0x100000;
            if (s >= keep + 1) emit(EventKind::free, addr, size, 0);
            emit(EventKind::alloc, addr, size, temp[(s * pairs + i) % stacks]);
        }
        emit(EventKind::alloc, 0x7f1000000000 + s * 4096, 4096, leak);
        const uint64_t slot = 0x7f2000000000 + (s % 16) * 0x10000;
        if (s >= 16) emit(EventKind::free, slot, 65536, 0);
        emit(EventKind::alloc, slot, 65536, cache);
        emit(EventKind::step, 0, 0, 0);
        events += 2 * pairs + 3 + (s >= 16);
    }
    w.close();
    std::printf("wrote %s: %llu steps, %llu events\n", argv[1], (unsigned long long)steps, (unsigned long long)events);
    return 0;
}
