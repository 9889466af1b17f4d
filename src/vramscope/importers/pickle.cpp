#include "importers/pickle.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <unordered_map>

namespace vramscope::pickle {

std::optional<Value> Document::get(Ref dict, std::string_view key, Ref* out_ref) const {
    if ((*this)[dict].type != Type::dict) return std::nullopt;
    std::optional<Value> found;
    for_each_pair(dict, [&](Ref k, Ref v) {
        if (!found && (*this)[k].type == Type::string && str(k) == key) {
            found = (*this)[v];
            if (out_ref) *out_ref = v;
        }
    });
    return found;
}

bool DirectInput::long_value(const uint8_t* b, uint64_t n, int64_t& out) {
    uint64_t v = 0;
    bool fits = true;
    if (n > 0) {
        const bool negative = b[n - 1] & 0x80;
        std::memcpy(&v, b, n < 8 ? n : 8);
        if (n < 8 && negative) v |= ~uint64_t(0) << (8 * n);
        // Wider: the rest must be sign bytes, and a negative value must still read as negative
        // in 64 bits (0xff-filled bytes over a clear bit 63 are below -2^63).
        fits = n <= 8 || !negative || (v >> 63);
        for (uint64_t k = 8; k < n; ++k) fits = fits && b[k] == (negative ? 0xff : 0x00);
    }
    out = int64_t(v);
    return fits;
}

class Parser {
    static constexpr Ref kNoRef = 0xFFFFFFFFu;
    struct Mark {
        size_t stack;
        uint32_t values, items, batches;  // arena sizes when the MARK was read
        size_t memo_log;
        Ref min_grown = kNoRef;           // oldest container given items since (immediates excluded)
        uint32_t direct = 0;              // items the sink took straight from the bytes (take_direct)
    };

public:
    Parser(std::string_view first, ChunkSource* more, Sink* sink, const std::string& name, const ReadLimits& limits)
        : p_(reinterpret_cast<const uint8_t*>(first.data())), chunk_(p_), end_(p_ + first.size()), more_(more),
          name_(name), sink_(sink), limits_(limits) {
        // Sized for snapshots (a value per ~12 bytes); pages of the unused part are never touched.
        const size_t expect = more ? size_t(16) << 20 : first.size();  // chunked: grow as needed
        doc_.values_.reserve(expect / 12);
        doc_.items_.reserve(expect / 3);
        // The memo grows with the whole input, also when a sink takes the items (a put every 24
        // to 32 bytes of a snapshot): sized once, it is never copied as it grows. A quarter of
        // the memory limit at most, whatever a hostile size hint says.
        const uint64_t whole = more ? more->expected_bytes() : first.size();
        const uint64_t cap = limits.max_held_bytes / 4 / sizeof(Ref);
        memo_.reserve(size_t(std::min(whole / 24, cap)));
        if (sink) memo_log_.reserve(size_t(std::min(whole / 64, cap)));
        stack_.reserve(1 << 12);
        marks_.reserve(64);
    }

    [[gnu::flatten]] Document run() {
        while (true) {
            op_at_ = chunk_offset_ + size_t(p_ - chunk_);
            if (__builtin_expect(p_ >= end_, 0) && !next_chunk()) fail("pickle cut short (no STOP opcode)");
            const uint8_t op = *p_++;
            switch (op) {
            case 0x80: take(1); break;                         // PROTO
            case 0x95: take(8); break;                         // FRAME: a hint for readers; no meaning here
            case '}': push(make(Type::dict)); break;           // EMPTY_DICT
            case ']': push(make(Type::list)); break;           // EMPTY_LIST
            case ')': push(make(Type::tuple)); break;          // EMPTY_TUPLE
            case 0x8f: push(make(Type::set)); break;           // EMPTY_SET
            case '(':  // MARK: also where a streamed batch's values begin
                if (marks_.size() >= limits_.max_depth)
                    fail("more than " + std::to_string(limits_.max_depth) + " containers open at once (the limit; --max-depth raises it)");
                marks_.push_back(Mark{stack_.size(), uint32_t(doc_.values_.size()), uint32_t(doc_.items_.size()),
                                      uint32_t(doc_.batches_.size()), memo_log_.size()});
                // A new batch of a list the sink streams: its items straight to the sink.
                if (sink_ && !stack_.empty() && streamed(stack_.back())) take_direct(stack_.back());
                break;
            case 'd': from_mark(Type::dict, 2); break;   // DICT
            case 'l': from_mark(Type::list, 1); break;   // LIST
            case 't': from_mark(Type::tuple, 1); break;  // TUPLE
            case 0x85: tuple_of(1); break;
            case 0x86: tuple_of(2); break;
            case 0x87: tuple_of(3); break;
            case 0x91: from_mark(Type::set, 1); break;   // FROZENSET
            case 's': {  // SETITEM
                need(3);
                add_items(stack_[stack_.size() - 3], Type::dict, stack_.size() - 2, 2);
                stack_.resize(stack_.size() - 2);
                break;
            }
            case 'a': {  // APPEND
                need(2);
                const Ref list = stack_[stack_.size() - 2];
                if (!offer(list, stack_.size() - 1, 1)) add_items(list, Type::list, stack_.size() - 1, 1);
                stack_.pop_back();
                break;
            }
            case 'u': add_to_container_below_mark(Type::dict, 2); break;  // SETITEMS
            case 'e': add_to_container_below_mark(Type::list, 1); break;  // APPENDS
            case 0x90: add_to_container_below_mark(Type::set, 1); break;  // ADDITEMS
            case 'J': {  // BININT
                const uint8_t* b = take(4);
                int32_t v;
                std::memcpy(&v, b, 4);
                push_int(v);
                break;
            }
            case 'K': push_int(*take(1)); break;  // BININT1
            case 'M': {                           // BININT2
                const uint8_t* b = take(2);
                push_int(b[0] | b[1] << 8);
                break;
            }
            case 0x8a: long_le(*take(1)); break;  // LONG1
            case 0x8b: long_le(u32(take(4))); break;  // LONG4
            case 'G': {                            // BINFLOAT: big-endian double
                const uint8_t* b = take(8);
                uint64_t bits = 0;
                for (int k = 0; k < 8; ++k) bits = bits << 8 | b[k];
                Ref r = make(Type::floating);
                std::memcpy(&doc_.values_[r].f, &bits, 8);
                push(r);
                break;
            }
            case 'N': push(make(Type::none)); break;
            case 0x88: push_bool(true); break;
            case 0x89: push_bool(false); break;
            case 0x8c: push_blob(Type::string, *take(1)); break;        // SHORT_BINUNICODE
            case 'X': push_blob(Type::string, u32(take(4))); break;      // BINUNICODE
            case 0x8d: push_blob(Type::string, u64(take(8))); break;     // BINUNICODE8
            case 'U': push_blob(Type::string, *take(1)); break;          // SHORT_BINSTRING (py2 str)
            case 'T': push_blob(Type::string, u32(take(4))); break;      // BINSTRING
            case 'C': push_blob(Type::bytes, *take(1)); break;           // SHORT_BINBYTES
            case 'B': push_blob(Type::bytes, u32(take(4))); break;       // BINBYTES
            case 0x8e: push_blob(Type::bytes, u64(take(8))); break;      // BINBYTES8
            case 0x96: push_blob(Type::bytes, u64(take(8))); break;      // BYTEARRAY8
            case 0x94: memo_put(memo_count_); break;                     // MEMOIZE
            case 'q': memo_put(*take(1)); break;                          // BINPUT
            case 'r': memo_put(u32(take(4))); break;                      // LONG_BINPUT
            case 'h': memo_get(*take(1)); break;                          // BINGET
            case 'j': memo_get(u32(take(4))); break;                      // LONG_BINGET
            case 'p': memo_put(line_uint()); break;                       // PUT (text)
            case 'g': memo_get(line_uint()); break;                       // GET (text)
            case 'I': text_int(); break;                                  // INT (text; also 00/01 bools)
            case 'L': text_int(); break;                                  // LONG (text)
            case 'F': text_float(); break;                                // FLOAT (text)
            case '0': need(1); stack_.pop_back(); break;                  // POP
            case '1': stack_.resize(pop_mark().stack); break;             // POP_MARK
            case '2': need(1); push(stack_.back()); break;                // DUP
            case '.':                                                     // STOP
                need(1);
                for (const Mark& m : marks_)  // items the sink took that no APPENDS placed
                    if (m.direct) throw NeedsWholeDocument();
                doc_.root_ = stack_.back();
                // Whatever follows is not part of the snapshot: refuse it rather than ignore
                // it. Reading on to the end also lets a gzip stream check its CRC and length.
                op_at_ = chunk_offset_ + size_t(p_ - chunk_);
                if (p_ < end_ || next_chunk()) fail("data follows the pickle's STOP opcode");
                return std::move(doc_);
            default: refuse(op);
            }
        }
    }

private:
    [[noreturn, gnu::noinline, gnu::cold]] void fail(const std::string& why) { throw Error(name_, op_at_, why); }

    [[noreturn]] void refuse(uint8_t op) {
        const char* name = nullptr;
        switch (op) {
        case 'c': name = "GLOBAL"; break;
        case 0x93: name = "STACK_GLOBAL"; break;
        case 'R': name = "REDUCE"; break;
        case 'b': name = "BUILD"; break;
        case 'i': name = "INST"; break;
        case 'o': name = "OBJ"; break;
        case 0x81: name = "NEWOBJ"; break;
        case 0x92: name = "NEWOBJ_EX"; break;
        case 0x82: name = "EXT1"; break;
        case 0x83: name = "EXT2"; break;
        case 0x84: name = "EXT4"; break;
        case 'P': name = "PERSID"; break;
        case 'Q': name = "BINPERSID"; break;
        case 0x97: name = "NEXT_BUFFER"; break;
        case 0x98: name = "READONLY_BUFFER"; break;
        }
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        if (name)
            fail(std::string("pickle opcode ") + name + " (" + hex +
                 ") would import or call code; vramscope reads plain data only and refused it (nothing was executed)");
        fail(std::string("unknown or unsupported pickle opcode ") + hex);
    }

    // The next chunk, once the current one is used up; false at the end of the input.
    [[gnu::noinline]] bool next_chunk() {
        if (in_bridge_) return leave_bridge();
        std::string_view c;
        do {
            if (!more_ || !more_->next(c)) return false;
        } while (c.empty());
        chunk_offset_ += size_t(end_ - chunk_);
        p_ = chunk_ = reinterpret_cast<const uint8_t*>(c.data());
        end_ = p_ + c.size();
        return true;
    }

    // The items of a streamed list's new batch, straight to the sink (Sink::take_direct) for as
    // long as it reads them; one that runs past the chunk is read from a bridge.
    void take_direct(Ref list) {
        if (memo_count_ != memo_.size()) return;  // a sparse memo: the generic path numbers it
        while (true) {
            DirectInput in(p_, end_, chunk_offset_ + size_t(p_ - chunk_), *this, memo_, memo_count_, memo_epoch_,
                           limits_.max_string_bytes);
            marks_.back().direct += uint32_t(sink_->take_direct(in, list));
            p_ = in.p;
            check_held();
            if (!in.short_of_bytes || !bridge()) return;
        }
    }

    // For an item that runs past the chunk: the chunk's rest and the next chunk's start, copied
    // together, become the chunk read (a bridge), so that the sink reads the item whole; the
    // parser then goes on in the next chunk where the bridge left it (leave_bridge). In a bridge
    // already, an item that starts in the next chunk's part is read there, with no copy. False
    // when no item is made whole: the input's end, or an item longer than a bridge.
    bool bridge() {
        if (in_bridge_) {
            if (size_t(p_ - chunk_) < bridge_tail_ || bridge_next_.empty()) return false;
            const size_t at = size_t(p_ - chunk_) - bridge_tail_;
            in_bridge_ = false;
            chunk_offset_ += bridge_tail_;
            chunk_ = reinterpret_cast<const uint8_t*>(bridge_next_.data());
            p_ = chunk_ + at;
            end_ = chunk_ + bridge_next_.size();
            return true;
        }
        const size_t tail = size_t(end_ - p_);
        if (!more_ || tail > kBridgeBytes / 2) return false;
        bridge_.assign(p_, end_);
        std::string_view c;
        try {  // what the source throws is the parser's error once it has read the bridge
            while (more_->next(c) && c.empty()) {}
        } catch (...) {
            bridge_error_ = std::current_exception();
        }
        bridge_next_ = c;
        bridge_head_ = std::min(c.size(), kBridgeBytes - tail);
        bridge_.insert(bridge_.end(), c.data(), c.data() + bridge_head_);
        bridge_tail_ = tail;
        in_bridge_ = true;
        chunk_offset_ += size_t(p_ - chunk_);
        p_ = chunk_ = bridge_.data();
        end_ = p_ + bridge_.size();
        return bridge_head_ > 0;
    }
    // The bridge read to its end: on in the next chunk, past what the bridge copied of it.
    bool leave_bridge() {
        in_bridge_ = false;
        if (bridge_error_) std::rethrow_exception(std::exchange(bridge_error_, nullptr));
        if (bridge_next_.empty()) return false;  // the input ended with the bridge
        chunk_offset_ += bridge_tail_;
        chunk_ = reinterpret_cast<const uint8_t*>(bridge_next_.data());
        p_ = chunk_ + bridge_head_;
        end_ = chunk_ + bridge_next_.size();
        return p_ < end_ || next_chunk();
    }

    // n bytes that straddle chunks, gathered into one place (valid until the next take).
    [[gnu::noinline]] const uint8_t* take_across(uint64_t n) {
        if (n > (uint64_t(1) << 32)) fail("pickle argument too large");
        straddle_.assign(p_, end_);
        p_ = end_;
        while (straddle_.size() < n) {
            if (!next_chunk()) fail("pickle cut short inside an opcode's argument");
            const size_t k = std::min<size_t>(size_t(end_ - p_), size_t(n) - straddle_.size());
            straddle_.insert(straddle_.end(), p_, p_ + k);
            p_ += k;
        }
        return straddle_.data();
    }

    [[gnu::always_inline]] const uint8_t* take(uint64_t n) {
        if (__builtin_expect(n > uint64_t(end_ - p_), 0)) return take_across(n);
        const uint8_t* at = p_;
        p_ += n;
        return at;
    }
    static uint32_t u32(const uint8_t* b) { return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24; }
    static uint64_t u64(const uint8_t* b) { return uint64_t(u32(b)) | uint64_t(u32(b + 4)) << 32; }

    Ref make(Type t) {
        if (doc_.values_.size() >= 0xFFFFFFF0u) fail("pickle holds too many values");
        doc_.values_.emplace_back();
        doc_.values_.back().type = t;
        if (__builtin_expect((doc_.values_.size() & 0xFFF) == 0, 0)) check_held();
        return Ref(doc_.values_.size() - 1);
    }
    void push(Ref r) {
        stack_.push_back(r);
        if (__builtin_expect((stack_.size() & 0xFFF) == 0, 0)) check_held();
    }
    // The document, stack and memo together stay under the limit, at their growth charge: a memo
    // fan-out (one value referenced a million times) or a bomb of small values ends here, not in
    // the allocator.
    [[gnu::noinline]] void check_held() {
        const uint64_t held = kGrowthCharge * (doc_.values_.size() * sizeof(Value) + doc_.items_.size() * sizeof(Ref) +
                                               doc_.text_.size() + doc_.batches_.size() * sizeof(Document::Batch) +
                                               (memo_.size() + stack_.size() + memo_log_.size()) * sizeof(Ref) +
                                               marks_.size() * sizeof(Mark));
        if (held > limits_.max_held_bytes)
            fail("the pickle's values take more than " + std::to_string(limits_.max_held_bytes >> 20) +
                 " MiB held at once (the limit; --max-memory raises it)");
    }
    void need(size_t n) {
        size_t floor = marks_.empty() ? 0 : marks_.back().stack;
        if (stack_.size() < floor + n) fail("pickle stack underflow");
    }
    // 31 bits, less the two patterns that are kNoRef and kForgotten.
    static bool fits_immediate(int64_t v) { return v >= -(int64_t(1) << 30) && v < (int64_t(1) << 30) && v != -1 && v != -2; }
    void push_int(int64_t v) {
        if (fits_immediate(v)) return push(kImmediate | (uint32_t(v) & ~kImmediate));
        Ref r = make(Type::integer);
        doc_.values_[r].i = v;
        push(r);
    }
    void push_bool(bool v) {
        Ref r = make(Type::boolean);
        doc_.values_[r].i = v;
        push(r);
    }
    void push_blob(Type t, uint64_t n) {
        if (n > limits_.max_string_bytes)
            fail("a string of " + std::to_string(n) + " bytes; the limit is " + std::to_string(limits_.max_string_bytes) +
                 " (--max-string raises it)");
        const uint8_t* b = take(n);
        if (doc_.text_.size() + n > 0xFFFFFFFFull) fail("strings in the pickle exceed 4 GiB");
        Ref r = make(t);
        doc_.values_[r].off = uint32_t(doc_.text_.size());
        doc_.text_.insert(doc_.text_.end(), b, b + n);
        doc_.values_[r].len = uint32_t(n);
        push(r);
        check_held();
    }
    // Little-endian two's complement, as LONG1/LONG4 store it. Addresses need up to 9 bytes
    // (a top bit set in 8 bytes is followed by a 0 sign byte); wider ones stay unusable.
    [[gnu::always_inline]] void long_le(uint64_t n) {
        int64_t v;
        const bool big = !DirectInput::long_value(take(n), n, v);
        if (!big && fits_immediate(v)) return push(kImmediate | (uint32_t(v) & ~kImmediate));
        const Ref r = make(big ? Type::big_integer : Type::integer);
        doc_.values_[r].i = v;
        push(r);
    }
    // A text opcode's argument, up to its newline (rare: protocol 0 and 1 only).
    std::string take_line() {
        std::string line;
        while (true) {
            const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', size_t(end_ - p_)));
            if (nl) {
                line.append(reinterpret_cast<const char*>(p_), size_t(nl - p_));
                p_ = nl + 1;
                return line;
            }
            line.append(reinterpret_cast<const char*>(p_), size_t(end_ - p_));
            p_ = end_;
            if (line.size() > 4096 || !next_chunk()) fail("pickle cut short inside a text argument");
        }
    }
    uint64_t line_uint() {
        std::string s = take_line();
        char* e = nullptr;
        unsigned long long v = std::strtoull(s.c_str(), &e, 10);
        if (s.empty() || *e != '\0') fail("bad memo index");
        return v;
    }
    void text_int() {
        std::string s = take_line();
        if (!s.empty() && s.back() == 'L') s.pop_back();
        if (s == "00" || s == "01") return push_bool(s == "01");
        char* e = nullptr;
        errno = 0;
        long long v = std::strtoll(s.c_str(), &e, 10);
        if (s.empty() || *e != '\0' || errno) fail("bad text integer");
        push_int(v);
    }
    void text_float() {
        std::string s = take_line();
        char* e = nullptr;
        double v = std::strtod(s.c_str(), &e);
        if (s.empty() || *e != '\0') fail("bad text float");
        Ref r = make(Type::floating);
        doc_.values_[r].f = v;
        push(r);
    }
    void memo_put(uint64_t idx) {
        need(1);
        if (idx == memo_.size()) {  // MEMOIZE, the usual way in
            memo_.push_back(stack_.back());
            ++memo_count_;
        } else {
            // Picklers number memo entries in order; a sparse index would only cost memory.
            if (idx > memo_.size() + (1u << 16)) fail("memo index " + std::to_string(idx) + " far past the memo's size");
            if (idx >= memo_.size()) memo_.resize(idx + 1, kNoRef);
            if (memo_[idx] == kNoRef) ++memo_count_;  // MEMOIZE's index is the memo's size
            memo_[idx] = stack_.back();
            ++memo_epoch_;
        }
        if (sink_) memo_log_.push_back(uint32_t(idx));
    }
    [[gnu::always_inline]] void memo_get(uint64_t idx) {
        if (idx >= memo_.size() || memo_[idx] == kNoRef) fail("memo index " + std::to_string(idx) + " was never stored");
        push(memo_[idx]);
    }
    // A batch whose items went to the sink straight from the bytes must end in APPENDS to their list: any
    // other use of the MARK means they were not the list's items after all (no torch snapshot
    // does this), so the sink's reading is void.
    Mark pop_mark(bool appends_to_list = false) {
        if (marks_.empty()) fail("pickle MARK missing");
        Mark m = marks_.back();
        if (m.direct && !appends_to_list) throw NeedsWholeDocument();
        marks_.pop_back();
        if (!marks_.empty()) marks_.back().min_grown = std::min(marks_.back().min_grown, m.min_grown);
        return m;
    }
    void tuple_of(size_t n) {
        need(n);
        Ref t = make(Type::tuple);
        add_items(t, Type::tuple, stack_.size() - n, n);
        stack_.resize(stack_.size() - n);
        push(t);
    }
    // A new container of what lies above the last MARK.
    void from_mark(Type t, size_t arity) {
        const Ref c = make(t);
        add_from_mark(c, t, arity);
        push(c);
    }
    void add_from_mark(Ref container, Type t, size_t arity) {
        const size_t m = pop_mark().stack;
        size_t n = stack_.size() - m;
        if (n % arity) fail("odd number of items for a dict");
        add_items(container, t, m, n);
        stack_.resize(m);
    }
    void add_to_container_below_mark(Type t, size_t arity) {
        const Mark mark = pop_mark(t == Type::list);
        const size_t m = mark.stack;
        if (m == (marks_.empty() ? 0 : marks_.back().stack)) fail("pickle stack underflow");
        size_t n = stack_.size() - m;
        if (n % arity) fail("odd number of items for a dict");
        const Ref container = stack_[m - 1];
        if (mark.direct) doc_.values_[container].len += mark.direct;
        if (t == Type::list && offer(container, m, n)) {
            forget_since(mark);
        } else {
            add_items(container, t, m, n);
        }
        stack_.resize(m);
    }

    // A batch for a list goes to the sink first; if it takes the items, the list only counts them.
    bool offer(Ref list, size_t from, size_t n) {
        if (n == 0 || !sink_ || (list & kImmediate) || doc_.values_[list].type != Type::list) return false;
        release_.clear();
        if (!sink_->take(doc_, list, stack_.data() + from, n, op_at_, release_)) return false;
        doc_.values_[list].len += uint32_t(n);
        if (!streamed(list)) streamed_.push_back(list);
        return true;
    }
    bool streamed(Ref list) const { return std::find(streamed_.begin(), streamed_.end(), list) != streamed_.end(); }

    // After the sink took a batch: everything made since its MARK is garbage unless the memo can
    // still reach it. Memo entries of what the sink forgot now yield `forgotten`; what else the
    // memo reaches (pickle memoizes every string) moves down to the window's start, and the arenas
    // shrink to that. A snapshot's million entries thus reuse the same few hundred kilobytes.
    void forget_since(const Mark& m) {
        if (m.min_grown < m.values) return;  // an older container now points into the window: keep all
        const uint32_t v0 = m.values, vn = uint32_t(doc_.values_.size());
        auto in_window = [&](Ref r) { return !(r & kImmediate) && r >= v0 && r < vn; };
        for (const auto& [r, token] : release_.as_token)  // what the memo reaches of it: the token alone
            if (in_window(r)) doc_.values_[r] = token_value(token);
        std::vector<uint8_t>& state = scratch_state_;  // 0 garbage, 1 forgotten, 2 kept
        state.assign(vn - v0, 0);
        for (Ref r : release_.forget)  // a token stays: other lists may be that token too
            if (in_window(r) && doc_.values_[r].type != Type::token) state[r - v0] = 1;
        std::vector<Ref>& work = scratch_work_;
        work.clear();
        size_t keep_log = m.memo_log;
        for (size_t k = m.memo_log; k < memo_log_.size(); ++k) {
            Ref& r = memo_[memo_log_[k]];
            if (!in_window(r)) continue;
            if (state[r - v0] == 1) {
                r = kForgotten;
                continue;
            }
            work.push_back(r);
            memo_log_[keep_log++] = memo_log_[k];
        }
        memo_log_.resize(keep_log);
        while (!work.empty()) {
            const Ref r = work.back();
            work.pop_back();
            if (state[r - v0] == 2) continue;
            state[r - v0] = 2;
            doc_.for_each_item(r, [&](Ref c) {
                if (in_window(c) && state[c - v0] != 2) work.push_back(c);
            });
        }
        // Kept values move down in order; kept containers get their items again, remapped.
        std::vector<Ref>& to = scratch_remap_;
        to.assign(vn - v0, kForgotten);  // what a ref to a dropped value reads as from now on
        uint32_t next = v0;
        for (uint32_t r = v0; r < vn; ++r)
            if (state[r - v0] == 2) to[r - v0] = next++;
        auto moved = [&](Ref c) { return in_window(c) ? to[c - v0] : c; };
        scratch_items_.clear();
        scratch_batches_.clear();
        for (uint32_t r = v0; r < vn; ++r) {
            if (state[r - v0] != 2) continue;
            Value v = doc_.values_[r];
            if (v.type >= Type::list) {
                uint32_t first = 0, last = 0;
                for (uint32_t b = v.first; b != 0; b = doc_.batches_[b].next) {
                    const Document::Batch& old = doc_.batches_[b];
                    const uint32_t id = m.batches + uint32_t(scratch_batches_.size());
                    scratch_batches_.push_back({m.items + uint32_t(scratch_items_.size()), old.count, 0});
                    for (uint32_t k = 0; k < old.count; ++k) scratch_items_.push_back(moved(doc_.items_[old.begin + k]));
                    if (last) scratch_batches_[last - m.batches].next = id;
                    else first = id;
                    last = id;
                }
                v.first = first;
                v.last = last;
            }
            doc_.values_[to[r - v0]] = v;
        }
        doc_.values_.resize(next);
        doc_.items_.resize(m.items);
        doc_.items_.insert(doc_.items_.end(), scratch_items_.begin(), scratch_items_.end());
        doc_.batches_.resize(m.batches);
        doc_.batches_.insert(doc_.batches_.end(), scratch_batches_.begin(), scratch_batches_.end());
        for (size_t k = m.memo_log; k < memo_log_.size(); ++k) memo_[memo_log_[k]] = moved(memo_[memo_log_[k]]);
        std::erase_if(streamed_, [&](Ref r) { return in_window(r); });
        shared_tokens_.clear();  // their values may have moved
        std::fill(small_tokens_.begin(), small_tokens_.end(), kNoRef);
        ++memo_epoch_;
        sink_->reclaimed(v0);
    }

    // One value per token: torch writes a fresh list for many entries of one stack (an empty one
    // for each allocation without Python frames), and a value each would grow with the trace.
    // Small tokens (a sink's ids: stack numbers) index a table, the rest a map: one a trace entry.
    Ref token_ref(int64_t token) {
        const bool small = token >= 0 && token < kSmallTokens;
        if (small && size_t(token) < small_tokens_.size() && small_tokens_[size_t(token)] != kNoRef)
            return small_tokens_[size_t(token)];
        auto [it, added] = shared_tokens_.try_emplace(token, 0);
        if (added) {
            it->second = make(Type::token);
            doc_.values_[it->second] = token_value(token);
        }
        if (small) {
            if (size_t(token) >= small_tokens_.size()) small_tokens_.resize(size_t(token) + 1, kNoRef);
            small_tokens_[size_t(token)] = it->second;
        }
        return it->second;
    }
    static Value token_value(int64_t token) {
        Value v;
        v.type = Type::token;
        v.i = token;
        return v;
    }

    // Appends stack_[from, from+n) to a container as one batch.
    void add_items(Ref container, Type want, size_t from, size_t n) {
        if ((container & kImmediate) || doc_.values_[container].type != want)
            fail("pickle adds items to a value of the wrong type");
        if (n == 0) return;
        if (!marks_.empty()) marks_.back().min_grown = std::min(marks_.back().min_grown, container);
        Document::Batch b;
        b.count = uint32_t(n);
        b.begin = uint32_t(doc_.items_.size());
        doc_.items_.insert(doc_.items_.end(), stack_.begin() + long(from), stack_.begin() + long(from + n));
        doc_.batches_.push_back(b);
        uint32_t id = uint32_t(doc_.batches_.size() - 1);
        Value& cc = doc_.values_[container];
        if (cc.first == 0) cc.first = id;
        else doc_.batches_[cc.last].next = id;
        cc.last = id;
        cc.len += uint32_t(want == Type::dict ? n / 2 : n);
        if (__builtin_expect((doc_.batches_.size() & 0xFFF) == 0, 0)) check_held();
    }

    std::vector<uint32_t> memo_log_;  // memo indices written, in order (only with a sink)
    std::vector<Ref> streamed_;       // lists whose items the sink takes
    std::unordered_map<int64_t, Ref> shared_tokens_;
    static constexpr int64_t kSmallTokens = 1 << 20;
    std::vector<Ref> small_tokens_;  // shared_tokens_' values of small tokens, by token
    Release release_;
    std::vector<uint8_t> scratch_state_;
    std::vector<Ref> scratch_work_, scratch_remap_, scratch_items_;
    std::vector<Document::Batch> scratch_batches_;
    const uint8_t* p_;
    const uint8_t* chunk_;  // the current chunk: [chunk_, end_)
    const uint8_t* end_;
    size_t chunk_offset_ = 0;  // of chunk_ in the whole input, for messages
    ChunkSource* more_;
    std::vector<uint8_t> straddle_;
    static constexpr size_t kBridgeBytes = 8192;
    std::vector<uint8_t> bridge_;
    bool in_bridge_ = false;
    size_t bridge_tail_ = 0, bridge_head_ = 0;  // bytes of the chunk before it, and of the one after
    std::string_view bridge_next_;              // the chunk after it (empty: the input ended there)
    std::exception_ptr bridge_error_;           // what the source threw instead of a chunk
    const std::string& name_;
    Sink* sink_;
    const ReadLimits& limits_;
    size_t op_at_ = 0;
    Document doc_;
    std::vector<Ref> stack_;
    std::vector<Mark> marks_;
    std::vector<Ref> memo_;
    uint64_t memo_count_ = 0;
    uint64_t memo_epoch_ = 0;  // see DirectInput::memo_epoch

    friend class DirectInput;
};

const Document& DirectInput::doc() const { return parser_->doc_; }
void DirectInput::keep_as_token(uint32_t index, int64_t token) {
    (*memo_)[index] = parser_->token_ref(token);
    parser_->memo_log_.push_back(index);
}
void DirectInput::undo_puts(size_t size) {
    if (size == memo_size_) return;
    *memo_count_ -= memo_size_ - size;
    memo_->resize(size);
    memo_size_ = size;
    ++*epoch_;  // the indices will hold other values
}

Document parse(std::string_view bytes, const std::string& name, Sink* sink, const ReadLimits& limits) {
    return Parser(bytes, nullptr, sink, name, limits).run();
}

Document parse(std::string_view first, ChunkSource& rest, const std::string& name, Sink* sink, const ReadLimits& limits) {
    return Parser(first, &rest, sink, name, limits).run();
}

}  // namespace vramscope::pickle
