// Interned strings, frames and stacks. A stack is a node in a prefix tree growing from the
// outermost frame inwards, so the thousands of allocations that share a call path share storage;
// ids are dense and start at 1 (0 means "none" everywhere).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vramscope {

struct Frame {
    uint32_t file = 0;      // string id
    uint32_t function = 0;  // string id
    uint32_t line = 0;
    bool operator==(const Frame&) const = default;
};

struct StackNode {
    uint32_t parent = 0;  // the caller's node; 0 at the outermost frame
    uint32_t frame = 0;
};

class StackTable {
public:
    StackTable();

    uint32_t intern_string(std::string_view s);
    uint32_t intern_frame(const Frame& f);
    uint32_t intern_stack(uint32_t parent, uint32_t frame);

    std::string_view string(uint32_t id) const { return strings_[id]; }
    const Frame& frame(uint32_t id) const { return frames_[id]; }
    const StackNode& node(uint32_t id) const { return nodes_[id]; }

    size_t string_count() const { return strings_.size() - 1; }
    size_t frame_count() const { return frames_.size() - 1; }
    size_t stack_count() const { return nodes_.size() - 1; }

    // Frames of a stack, innermost first (the order torch prints them in).
    std::vector<uint32_t> frames_of(uint32_t stack) const;

private:
    struct PairHash {
        size_t operator()(uint64_t v) const { return std::hash<uint64_t>{}(v * 0x9E3779B97F4A7C15ull); }
    };
    // Every field mixed, and frames compared whole: a file's frames cannot be made to collide.
    struct FrameHash {
        size_t operator()(const Frame& f) const {
            return PairHash{}((uint64_t(f.file) << 32 | f.function) ^ uint64_t(f.line) * 0xC2B2AE3D27D4EB4Full);
        }
    };
    std::vector<std::string> strings_;
    std::unordered_map<std::string, uint32_t> string_ids_;
    std::vector<Frame> frames_;
    std::unordered_map<Frame, uint32_t, FrameHash> frame_ids_;
    std::vector<StackNode> nodes_;
    std::unordered_map<uint64_t, uint32_t, PairHash> node_ids_;   // key: parent << 32 | frame
};

}  // namespace vramscope
