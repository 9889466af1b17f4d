// Where a live capture hands what it records. The recorder (capture/) only records: stamps,
// stacks, orders and writes events. What they mean is a sink's business: the live monitor
// (analysis/live_sink.h) judges them while the run goes on. Called on the recorder's drain, under
// its lock: each device's events in the order its allocator numbered them, devices by time, each
// marker after exactly the events numbered before it (capture/recorder.h).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "events/event.h"

namespace vramscope {

// A frame of a stack met for the first time, as the recorder named it in the trace. The views
// stay valid while the recorder lives.
struct SinkFrame {
    uint32_t id = 0;  // the trace's frame id
    std::string_view file, function;
    uint32_t line = 0;
};

class EventSink {
public:
    virtual ~EventSink() = default;
    // A device's capacity, and what was allocated on it before the capture began.
    virtual void device(uint8_t device, uint64_t capacity, uint64_t allocated_before) = 0;
    // A stack met for the first time, innermost frame first (an autograd node outermost), before
    // any event that names it.
    virtual void stack(uint32_t stack, std::span<const SinkFrame> frames) = 0;
    // A name an event will carry (a pool reading's library: EventKind::pool_usage) met for the
    // first time, before any event that names it. Markers' names are ids only: no sink reads them.
    virtual void name(uint32_t id, std::string_view text) { (void)id, (void)text; }
    // The next events, step markers among them (each named by its step's unit).
    virtual void events(std::span<const Event> events) = 0;
};

}  // namespace vramscope
