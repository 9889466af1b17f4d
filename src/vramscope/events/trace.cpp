#include "events/trace.h"

namespace vramscope {

DeviceInfo& Trace::device(uint16_t id) {
    for (auto& d : devices)
        if (d.device == id) return d;
    devices.push_back(DeviceInfo{id});
    return devices.back();
}

}  // namespace vramscope
