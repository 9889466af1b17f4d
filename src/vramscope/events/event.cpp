#include "events/event.h"

#include <array>

namespace vramscope {
namespace {
// Spelled as torch's snapshot `action` field where torch has one, so both vocabularies agree
// (torch 2.0 wrote a whole free as "free", later ones split it in two).
constexpr std::array<std::string_view, kEventKindCount> kNames = {
    "alloc",         "free_requested", "free_completed", "segment_alloc",   "segment_free",
    "segment_map",   "segment_unmap",  "oom",            "step",            "microbatch",
    "annotation_start", "annotation_end", "snapshot",       "free",          "external_alloc",
    "external_free", "pinned_alloc",   "pinned_free",    "device_usage",
    "pool_usage"};
}  // namespace

std::string_view event_kind_name(EventKind kind) { return kNames[size_t(kind)]; }

bool parse_event_kind(std::string_view name, EventKind& out) {
    for (int i = 0; i < kEventKindCount; ++i) {
        if (kNames[i] == name) {
            out = static_cast<EventKind>(i);
            return true;
        }
    }
    return false;
}

}  // namespace vramscope
