#include "importers/entry_decoder.h"

#include <cstring>

namespace vramscope {

namespace op = pickle::op;
using pickle::Ref;

namespace {
// The most bytes one step reads before its next check: a key's GET (5), a value's opcode and
// fixed argument (10), and the next opcode.
constexpr size_t kStep = 16;

bool is_get(uint8_t opcode) { return opcode == op::kBinGet || opcode == op::kLongBinGet; }

void add_frame(DecodedEntry& out, Ref r) {
    if (__builtin_expect(out.frame_count == out.frame_refs.size(), 0)) out.frame_refs.resize(2 * out.frame_count + 64);
    out.frame_refs[out.frame_count++] = r;
}

// Keys whose value the importer reads; the others' values are only stepped over.
bool is_read(Key k) { return k != Key::other && k != Key::filename && k != Key::line && k != Key::name; }
}  // namespace

[[gnu::always_inline]] inline bool EntryDecoder::room(pickle::DirectInput& in, const uint8_t*& q) {
    while (true) {
        if (size_t(in.end - q) < kStep) return !(short_ = true);
        if (*q != op::kFrame) return true;
        if (!in.skip_frame(q)) return !(short_ = true);
    }
}

// EMPTY_DICT, a memo put, then MARK, pairs and SETITEMS, or one pair and SETITEM.
[[gnu::always_inline]] inline bool EntryDecoder::read_dict(pickle::DirectInput& in, const uint8_t*& q, KeyCache& keys, DecodedEntry& out) {
    if (!room(in, q) || *q != op::kEmptyDict) return false;
    ++q;
    uint32_t index;
    bool out_of_order;
    if (!in.put(q, pickle::kForgotten, index, out_of_order) && out_of_order) return false;
    if (!room(in, q)) return false;
    const bool batch = *q == op::kMark;
    q += batch;
    for (size_t place = 0;; ++place) {
        if (!room(in, q)) return false;
        if (batch && *q == op::kSetItems) {
            ++q;
            return place > 0;
        }
        const Slot* key = read_key(in, q, place, keys);
        if (!key || (out.present & key->bit)) return false;
        if (!read_value(in, q, *key, out)) return false;
        if (!batch) return room(in, q) && *q++ == op::kSetItem;
    }
}

// The key at `q`, the `place`-th of its dict; null if it is no GET (or past the last place).
[[gnu::always_inline]] inline const EntryDecoder::Slot* EntryDecoder::read_key(pickle::DirectInput& in, const uint8_t*& q,
                                                                               size_t place, KeyCache& keys) {
    const Slot& slot = slots_[place];  // the one past the last place never matches
    uint64_t bytes;
    std::memcpy(&bytes, q, 8);  // room() left kStep bytes
    if (__builtin_expect(((bytes ^ slot.bytes) & slot.mask) != 0 || slot.length == 0, 0))
        return learn_key(in, q, place, keys);
    q += slot.length;
    return &slot;
}

// A key not met at this place before (or since the memo changed): resolved, and kept.
const EntryDecoder::Slot* EntryDecoder::learn_key(pickle::DirectInput& in, const uint8_t*& q, size_t place, KeyCache& keys) {
    if (place == DecodedEntry::kMaxFields) return nullptr;
    if (*q == op::kFrame && !(in.skip_frame(q) && room(in, q))) return nullptr;
    const uint8_t opcode = *q;
    const uint8_t* after = q + 1;
    Ref ref;
    if (!is_get(opcode) || !in.get(after, opcode, ref)) return nullptr;
    Slot& slot = slots_[place];
    std::memcpy(&slot.bytes, q, 8);
    slot.length = uint8_t(after - q);
    slot.mask = ~uint64_t(0) >> (64 - 8 * slot.length);
    slot.bytes &= slot.mask;
    slot.key = keys(in.doc(), ref);
    slot.bit = is_read(slot.key) ? 1u << unsigned(slot.key) : 0;
    q = after;
    return &slot;
}

[[gnu::always_inline]] inline bool EntryDecoder::read_value(pickle::DirectInput& in, const uint8_t*& q, const Slot& slot,
                                                            DecodedEntry& out) {
    // room() before the key left room for the value too, unless a FRAME comes between.
    if (*q == op::kFrame && !(in.skip_frame(q) && room(in, q))) return false;
    const Key key = slot.key;
    const uint8_t opcode = *q++;
    FieldValue& v = out.values[size_t(key)];  // kept (marked present) only for a field the importer reads
    // Tests in the order of how often they hold, not a switch: each place of an entry has its
    // own, mostly the same, and a branch each predicts that better than one jump for all.
    if (opcode == op::kLongBinGet || opcode == op::kBinGet) {
        v.kind = FieldValue::Kind::ref;
        if (!in.get(q, opcode, v.ref)) return false;
    } else if (opcode == op::kLong1 || opcode == op::kBinInt || opcode == op::kBinInt1 || opcode == op::kBinInt2) {
        v.kind = FieldValue::Kind::integer;
        if (key == Key::action || key == Key::frames || !in.integer(q, opcode, v.integer)) return false;
    } else if (opcode == op::kShortBinUnicode || opcode == op::kBinUnicode) {
        return !slot.bit && skip_string(in, q, opcode);
    } else if (opcode == op::kEmptyList) {
        if (key != Key::frames || !read_frames_list(in, q, out, v)) return false;
    } else {
        return (opcode == op::kNone || opcode == op::kNewTrue || opcode == op::kNewFalse) && !slot.bit;
    }
    out.present |= slot.bit;  // a frame's keys at an entry's level are nothing to the importer
    return true;
}

// A string put in the memo, if at all, as forgotten: the importer never reads it.
[[gnu::always_inline]] inline bool EntryDecoder::skip_string(pickle::DirectInput& in, const uint8_t*& q, uint8_t opcode) {
    const size_t width = opcode == op::kShortBinUnicode ? 1 : 4;
    const uint64_t length = width == 1 ? *q : pickle::le32(q);
    if (length > in.max_string_bytes) return false;  // the generic path says so
    if (size_t(in.end - q) < width + length + kStep) return !(short_ = true);
    q += width + length;
    uint32_t index;
    bool out_of_order;
    return in.put(q, pickle::kForgotten, index, out_of_order) || !out_of_order;
}

// EMPTY_LIST, a memo put, then nothing, GET and APPEND, or batches of GETs (MARK ... APPENDS).
[[gnu::always_inline]] inline bool EntryDecoder::read_frames_list(pickle::DirectInput& in, const uint8_t*& q, DecodedEntry& out, FieldValue& v) {
    v.kind = FieldValue::Kind::refs;
    v.first = out.frame_count;
    uint32_t index;
    bool out_of_order;
    if (in.put(q, pickle::kForgotten, index, out_of_order)) out.frames_list = index;
    else if (out_of_order) return false;
    if (!room(in, q)) return false;
    Ref r;
    if (is_get(*q)) {  // one frame
        const uint8_t opcode = *q++;
        if (!in.get(q, opcode, r) || !room(in, q) || *q++ != op::kAppend || !room(in, q)) return false;
        add_frame(out, r);
    }
    while (*q == op::kMark) {
        ++q;
        while (true) {
            if (!room(in, q)) return false;
            const uint8_t opcode = *q++;
            if (opcode == op::kAppends) break;
            if (!is_get(opcode) || !in.get(q, opcode, r)) return false;
            add_frame(out, r);
        }
        if (!room(in, q)) return false;
    }
    v.count = out.frame_count - v.first;
    return true;
}

[[gnu::flatten]] bool EntryDecoder::decode(pickle::DirectInput& in, KeyCache& keys, DecodedEntry& out) {
    if (in.memo_epoch() != epoch_) {  // the memo's entries changed: the keys may name other values
        slots_.fill(Slot{});
        epoch_ = in.memo_epoch();
    }
    out.present = 0;
    out.frame_count = 0;
    out.frames_list = DecodedEntry::kNoList;
    out.memo_before = in.memo_size();
    short_ = false;
    const uint8_t* q = in.p;
    if (!read_dict(in, q, keys, out)) {
        in.undo_puts(out.memo_before);
        in.short_of_bytes = short_;
        return false;
    }
    in.p = q;
    return true;
}

}  // namespace vramscope
