// Builds synthetic traces with known answers for the tests.
#pragma once
#include <string>

#include "events/trace.h"

namespace vramscope::testing {

class TraceBuilder {
public:
    TraceBuilder() { t.format = "test"; t.source = "synthetic"; t.device(0); }

    // A stack of (file, line, function) frames, innermost first.
    uint32_t stack(std::initializer_list<std::tuple<const char*, uint32_t, const char*>> frames) {
        std::vector<uint32_t> ids;
        for (auto& [file, line, fn] : frames)
            ids.push_back(t.stacks.intern_frame(Frame{t.stacks.intern_string(file), t.stacks.intern_string(fn), line}));
        uint32_t node = 0;
        for (size_t i = ids.size(); i-- > 0;) node = t.stacks.intern_stack(node, ids[i]);
        return node;
    }
    void alloc(uint64_t addr, uint64_t size, uint32_t stack, uint64_t stream = 0) {
        push(EventKind::alloc, addr, size, stream, stack);
    }
    void free(uint64_t addr, uint64_t size, uint64_t stream = 0) { push(EventKind::free, addr, size, stream, 0); }
    // Freed on a side stream's schedule: the completion comes later.
    void free_later(uint64_t addr, uint64_t size, uint64_t stream = 0) {
        push(EventKind::free_requested, addr, size, stream, 0);
        push(EventKind::free_completed, addr, size, stream, 0);
    }
    void segment(uint64_t addr, uint64_t size) { push(EventKind::segment_alloc, addr, size, 0, 0); }
    void oom(uint64_t device_free, uint64_t asked) { push(EventKind::oom, device_free, asked, 0, 0); }
    void step() { push(EventKind::step, 0, 0, 0, 0); }
    void annotation(EventKind kind, const char* name) {
        Event e;
        e.kind = kind;
        e.time_us = ++time;
        e.name = t.stacks.intern_string(name);
        t.events.push_back(e);
    }

    // A library pool's reading (EventKind::pool_usage): its bytes in use and its pool's.
    void pool(const char* library, uint64_t in_use, uint64_t pool_bytes, uint8_t device = 0) {
        Event e;
        e.kind = EventKind::pool_usage;
        e.time_us = (time += 3);
        e.name = t.stacks.intern_string(library);
        e.size = in_use;
        e.addr = pool_bytes;
        e.device = device;
        t.events.push_back(e);
    }

    Trace t;
    int64_t time = 1000;

private:
    void push(EventKind kind, uint64_t addr, uint64_t size, uint64_t stream, uint32_t stack) {
        Event e;
        e.kind = kind;
        e.addr = addr;
        e.size = size;
        e.stream = t.stream_index(stream);
        e.stack = stack;
        e.time_us = (time += 3);
        t.events.push_back(e);
    }
};

}  // namespace vramscope::testing
