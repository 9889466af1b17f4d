// The keys of a torch snapshot's dicts that the importer reads, and what a dict's value reads as:
// one vocabulary for the generic path (dicts of the Document) and the direct one (entry_decoder.h).
#pragma once
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "importers/pickle.h"

namespace vramscope {

enum class Key : uint8_t { other, action, addr, size, stream, time_us, frames, device_free, filename, line, name };
inline constexpr size_t kKeys = size_t(Key::name) + 1;

// Snapshot dicts repeat a dozen key strings millions of times, and pickle's memo makes each
// repeat the same value: resolve a key value to its field once, then compare ids.
class KeyCache {
public:
    void forget_from(pickle::Ref first) {
        for (auto& [ref, k] : seen_)
            if (ref >= first && !(ref & pickle::kImmediate)) ref = kNoKey;
    }
    Key operator()(const pickle::Document& doc, pickle::Ref key) {
        auto& [ref, k] = seen_[key & (seen_.size() - 1)];
        if (ref == key) return k;
        ref = key;
        k = resolve(doc, key);
        return k;
    }

private:
    static Key resolve(const pickle::Document& doc, pickle::Ref key) {
        if (doc[key].type != pickle::Type::string) return Key::other;
        static constexpr std::pair<std::string_view, Key> kNames[] = {
            {"action", Key::action},           {"addr", Key::addr},         {"size", Key::size},
            {"stream", Key::stream},           {"time_us", Key::time_us},   {"frames", Key::frames},
            {"device_free", Key::device_free}, {"filename", Key::filename}, {"line", Key::line},
            {"name", Key::name}};
        for (const auto& [name, id] : kNames)
            if (doc.str(key) == name) return id;
        return Key::other;
    }

    static constexpr pickle::Ref kNoKey = 0xFFFFFFFFu;
    std::vector<std::pair<pickle::Ref, Key>> seen_ = std::vector<std::pair<pickle::Ref, Key>>(1024, {kNoKey, Key::other});
};

// What a trace entry's field holds, as the importer reads it: a value of the Document (what the
// generic path gives for every field, and the direct one for a memo GET), an integer read
// straight from the bytes, or a frames list written out in the entry, as the Refs of its items.
struct FieldValue {
    enum class Kind : uint8_t { ref, integer, refs };
    Kind kind = Kind::ref;
    pickle::Ref ref = 0;
    int64_t integer = 0;
    uint32_t first = 0, count = 0;  // refs: [first, first + count) of the items passed along
};

}  // namespace vramscope
