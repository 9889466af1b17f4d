#include "events/trace.h"

#include <stdexcept>

namespace vramscope {

DeviceInfo& Trace::device(uint16_t id) {
    for (auto& d : devices)
        if (d.device == id) return d;
    devices.push_back(DeviceInfo{id});
    return devices.back();
}

size_t Trace::entry_count() const {
    size_t n = events.size();
    for (const Event& e : events) n += e.kind == EventKind::free;
    return n;
}

uint16_t Trace::stream_index(uint64_t handle) {
    for (size_t i = 0; i < streams.size(); ++i)
        if (streams[i] == handle) return uint16_t(i);
    if (streams.size() > 0xFFFF) throw std::runtime_error(source + ": more than 65,535 CUDA streams");
    streams.push_back(handle);
    return uint16_t(streams.size() - 1);
}

}  // namespace vramscope
