// Reads a torch snapshot's trace entries straight from the pickle's bytes (pickle::DirectInput),
// as torch writes them: a dict whose keys are memo GETs of the same strings in the same order,
// whose values are integers, memo GETs, a fresh string in a field not read, and a frames list
// of memo GETs of frame dicts. The bytes that name the key at each place are kept once resolved,
// so a key costs one compare. Anything else (a key or frame dict written out, a FRAME where its
// argument runs past the bytes at hand, a repeated field) is left to the generic parser.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "importers/pickle_direct.h"
#include "importers/snapshot_keys.h"

namespace vramscope {

// One entry's fields that the importer reads, by key: each at most once (a dict that repeats one
// is left to the generic path), so the order they came in changes nothing.
struct DecodedEntry {
    static constexpr size_t kMaxFields = 32;
    static constexpr uint32_t kNoList = UINT32_MAX;
    std::array<FieldValue, kKeys> values;
    uint32_t present = 0;                 // bit k: values[k] was read
    bool has(Key k) const { return present & (1u << unsigned(k)); }
    const FieldValue& operator[](Key k) const { return values[size_t(k)]; }
    std::vector<pickle::Ref> frame_refs;  // the items of a frames list written out: [0, frame_count)
    uint32_t frame_count = 0;
    uint32_t frames_list = kNoList;       // that list's memo index, to keep it as the stack it reads as
    size_t memo_before = 0;               // the memo's size before the entry: to undo its puts
};

class EntryDecoder {
public:
    // The entry at `in.p`: true with `in.p` past it and its fields in `out` (its memo puts made:
    // the dict and strings not read as forgotten, a frames list as forgotten until it is kept).
    // False leaves `in.p` and the memo as they were, with `in.short_of_bytes` if it ran past
    // `in.end`.
    bool decode(pickle::DirectInput& in, KeyCache& keys, DecodedEntry& out);

private:
    // The key at one place of the entry, as the bytes of its GET (an opcode and up to 4 bytes).
    struct Slot {
        uint64_t bytes = 0, mask = 0;
        uint8_t length = 0;  // 0: none yet
        Key key = Key::other;
        uint32_t bit = 0;  // DecodedEntry::present's bit for the key; 0 for a key the importer does not read
    };

    bool read_dict(pickle::DirectInput& in, const uint8_t*& q, KeyCache& keys, DecodedEntry& out);
    const Slot* read_key(pickle::DirectInput& in, const uint8_t*& q, size_t place, KeyCache& keys);
    const Slot* learn_key(pickle::DirectInput& in, const uint8_t*& q, size_t place, KeyCache& keys);
    bool read_value(pickle::DirectInput& in, const uint8_t*& q, const Slot& slot, DecodedEntry& out);
    bool read_frames_list(pickle::DirectInput& in, const uint8_t*& q, DecodedEntry& out, FieldValue& v);
    bool skip_string(pickle::DirectInput& in, const uint8_t*& q, uint8_t opcode);
    // Room for one step (a key, an opcode and its fixed argument, the next opcode) at `q`,
    // FRAME hints stepped over; false (and short_ set) where the bytes at hand end first.
    bool room(pickle::DirectInput& in, const uint8_t*& q);

    std::array<Slot, DecodedEntry::kMaxFields + 1> slots_{};
    uint64_t epoch_ = UINT64_MAX;  // the memo's, when slots_ were filled
    bool short_ = false;
};

}  // namespace vramscope
