#include "events/stack_table.h"

namespace vramscope {

StackTable::StackTable() : strings_(1), frames_(1), nodes_(1) {}

uint32_t StackTable::intern_string(std::string_view s) {
    auto [it, inserted] = string_ids_.try_emplace(std::string(s), uint32_t(strings_.size()));
    if (inserted) strings_.emplace_back(s);
    return it->second;
}

uint32_t StackTable::intern_frame(const Frame& f) {
    auto [it, inserted] = frame_ids_.try_emplace(f, uint32_t(frames_.size()));
    if (inserted) frames_.push_back(f);
    return it->second;
}

uint32_t StackTable::intern_stack(uint32_t parent, uint32_t frame) {
    uint64_t key = (uint64_t(parent) << 32) | frame;
    auto [it, inserted] = node_ids_.try_emplace(key, uint32_t(nodes_.size()));
    if (inserted) nodes_.push_back({parent, frame});
    return it->second;
}

std::vector<uint32_t> StackTable::frames_of(uint32_t stack) const {
    std::vector<uint32_t> out;
    for (uint32_t id = stack; id != 0; id = nodes_[id].parent) out.push_back(nodes_[id].frame);
    return out;
}

}  // namespace vramscope
