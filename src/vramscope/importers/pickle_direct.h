// What a pickle::Sink decodes straight from the bytes (Sink::take_direct): the bytes of a
// streamed list's next items and the parser's memo, with the opcodes' own readers, so that a
// sink that knows its items' shape needs no Document values for them.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

namespace vramscope::pickle {

using Ref = uint32_t;
class Document;
class Parser;

// Pickle's opcodes that a direct decoder meets (the generic parser reads them all).
namespace op {
inline constexpr uint8_t kMark = '(', kEmptyDict = '}', kEmptyList = ']', kSetItem = 's', kSetItems = 'u',
                         kAppend = 'a', kAppends = 'e', kBinGet = 'h', kLongBinGet = 'j', kBinPut = 'q',
                         kLongBinPut = 'r', kMemoize = 0x94, kFrame = 0x95, kBinInt = 'J', kBinInt1 = 'K',
                         kBinInt2 = 'M', kLong1 = 0x8a, kShortBinUnicode = 0x8c, kBinUnicode = 'X', kNone = 'N',
                         kNewTrue = 0x88, kNewFalse = 0x89;
}  // namespace op

inline uint32_t le32(const uint8_t* b) {
    uint32_t v;
    std::memcpy(&v, b, 4);
    return v;
}

// Its readers are inlined: a decoder calls them a dozen times an item, millions of times.
class DirectInput {
public:
    // How many bytes an opcode and its fixed argument take at most (LONG1 of 8 bytes: 10).
    static constexpr size_t kLongestFixedOp = 10;

    const uint8_t* p;    // the next item's first byte: a decoder moves it past each item it takes
    const uint8_t* end;  // of the bytes at hand; an item that runs past it is left to the parser
    bool short_of_bytes = false;  // set by a decoder that stopped because an item ran past `end`
    const uint64_t max_string_bytes;  // ReadLimits': a longer string is the generic path's error

    // The Document the memo's Refs name.
    const Document& doc() const;
    // Changes whenever an entry of the memo changes or the values it names move: what a decoder
    // keeps about memo entries (by index or by Ref) is void once it differs.
    uint64_t memo_epoch() const { return *epoch_; }
    // Where `at` lies in the whole input, for messages.
    size_t offset(const uint8_t* at) const { return origin_ + size_t(at - origin_p_); }

    // FRAME is a hint for readers that may come between any two opcodes: step over it.
    [[gnu::always_inline]] bool skip_frame(const uint8_t*& q) const {
        if (*q != op::kFrame) return false;
        if (size_t(end - q) < 9 + kLongestFixedOp) return false;
        q += 9;
        return true;
    }

    // The memo entry a BINGET / LONG_BINGET at `q` (past its opcode) names; false if none, or
    // past `end`.
    [[gnu::always_inline]] bool get(const uint8_t*& q, uint8_t opcode, Ref& r) const {
        const size_t width = opcode == op::kBinGet ? 1 : 4;
        if (size_t(end - q) < width) return false;
        const uint64_t index = width == 1 ? *q : le32(q);
        if (index >= memo_size_ || memo_data_[index] == kNoRef) return false;
        r = memo_data_[index];
        q += width;
        return true;
    }
    // A memo put at `q`, if one follows (MEMOIZE, or BINPUT / LONG_BINPUT naming the memo's next
    // index): stores `r` there and gives its index. False, `q` unmoved: no put, or one elsewhere
    // (`out_of_order`: the generic parser numbers those).
    [[gnu::always_inline]] bool put(const uint8_t*& q, Ref r, uint32_t& index, bool& out_of_order) {
        const uint64_t next = memo_size_;
        const size_t left = size_t(end - q);
        out_of_order = false;
        if (left >= 1 && *q == op::kMemoize) {
            q += 1;
        } else if (left >= 2 && *q == op::kBinPut && q[1] == next) {
            q += 2;
        } else if (left >= 5 && *q == op::kLongBinPut && le32(q + 1) == next) {
            q += 5;
        } else {
            out_of_order = left == 0 || *q == op::kBinPut || *q == op::kLongBinPut;  // or not known here
            return false;
        }
        index = uint32_t(next);
        memo_->push_back(r);
        memo_data_ = memo_->data();
        ++memo_size_;
        ++*memo_count_;
        return true;
    }
    // The memo entry `index` (one of the item's own puts) now holds the value of `token`.
    void keep_as_token(uint32_t index, int64_t token);
    // Memo entries from `size` on are dropped: the puts of an item not taken after all.
    void undo_puts(size_t size);
    size_t memo_size() const { return memo_size_; }

    // An integer opcode's value (BININT1, BININT2, BININT, LONG1), `q` past the opcode; false
    // (`q` unmoved) for another opcode, a LONG1 wider than 64 bits, or past `end`.
    [[gnu::always_inline]] bool integer(const uint8_t*& q, uint8_t opcode, int64_t& v) const {
        const size_t left = size_t(end - q);
        switch (opcode) {
        case op::kBinInt1: return left >= 1 && (v = q[0], q += 1, true);
        case op::kBinInt2: return left >= 2 && (v = q[0] | q[1] << 8, q += 2, true);
        case op::kBinInt: return left >= 4 && (v = int32_t(le32(q)), q += 4, true);
        case op::kLong1: return left >= 1 && long1(q, v);
        default: return false;
        }
    }
    // Little-endian two's complement in n bytes, as LONG1/LONG4 store it: the low 64 bits; false
    // when the value needs more. Positive values in [2^63, 2^64) keep their bits (addresses).
    static bool long_value(const uint8_t* b, uint64_t n, int64_t& out);

private:
    friend class Parser;
    static constexpr Ref kNoRef = 0xFFFFFFFFu;
    DirectInput(const uint8_t* at, const uint8_t* stop, size_t offset, Parser& parser, std::vector<Ref>& memo,
                uint64_t& memo_count, uint64_t& epoch, uint64_t max_string)
        : p(at), end(stop), max_string_bytes(max_string), parser_(&parser), memo_(&memo), memo_count_(&memo_count),
          epoch_(&epoch), origin_(offset), origin_p_(at), memo_data_(memo.data()), memo_size_(memo.size()) {}

    [[gnu::always_inline]] bool long1(const uint8_t*& q, int64_t& v) const {
        const size_t n = *q;
        if (size_t(end - q) < 1 + n) return false;
        if (n - 1 < 8 && size_t(end - q) >= 9) {
            // 1 to 8 bytes (addresses, times), 8 readable: one load and a sign-extending shift.
            uint64_t bits;
            std::memcpy(&bits, q + 1, 8);
            const unsigned unused = unsigned(64 - 8 * n);
            v = int64_t(bits << unused) >> unused;
        } else if (!long_value(q + 1, n, v)) {
            return false;
        }
        q += 1 + n;
        return true;
    }

    Parser* parser_;
    std::vector<Ref>* memo_;
    uint64_t* memo_count_;
    uint64_t* epoch_;
    size_t origin_;  // the offset of origin_p_
    const uint8_t* origin_p_;
    const Ref* memo_data_;  // *memo_'s, kept here: a GET reads them without going through it
    size_t memo_size_;
};

}  // namespace vramscope::pickle
