#include "importers/pickle.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

class Parser {
public:
    Parser(const char* base, size_t available, GrowingInput* more, const std::string& name)
        : p_(reinterpret_cast<const uint8_t*>(base)), begin_(p_), end_(p_ + available), more_(more), name_(name) {
        doc_.base_ = base;
        // Sized for snapshots (a value per ~12 bytes); huge pages leave the unused part untouched.
        const size_t expect = more ? size_t(256) << 20 : available;
        doc_.values_.reserve(expect / 12);
        doc_.items_.reserve(expect / 3);
    }

    Document run() {
        while (true) {
            op_at_ = size_t(p_ - begin_);
            if (p_ >= end_ && !refill(1)) fail("pickle cut short (no STOP opcode)");
            const uint8_t op = *p_++;
            switch (op) {
            case 0x80: take(1); break;                         // PROTO
            case 0x95: take(8); break;                         // FRAME: a hint for readers; no meaning here
            case '}': push(make(Type::dict)); break;           // EMPTY_DICT
            case ']': push(make(Type::list)); break;           // EMPTY_LIST
            case ')': push(make(Type::tuple)); break;          // EMPTY_TUPLE
            case 0x8f: push(make(Type::set)); break;           // EMPTY_SET
            case '(': marks_.push_back(stack_.size()); break;  // MARK
            case 'd': {                                        // DICT
                Ref d = make(Type::dict);
                add_from_mark(d, Type::dict, 2);
                push(d);
                break;
            }
            case 'l': {  // LIST
                Ref l = make(Type::list);
                add_from_mark(l, Type::list, 1);
                push(l);
                break;
            }
            case 't': {  // TUPLE
                Ref t = make(Type::tuple);
                add_from_mark(t, Type::tuple, 1);
                push(t);
                break;
            }
            case 0x85: tuple_of(1); break;
            case 0x86: tuple_of(2); break;
            case 0x87: tuple_of(3); break;
            case 0x91: {  // FROZENSET
                Ref s = make(Type::set);
                add_from_mark(s, Type::set, 1);
                push(s);
                break;
            }
            case 's': {  // SETITEM
                need(3);
                add_items(stack_[stack_.size() - 3], Type::dict, stack_.size() - 2, 2);
                stack_.resize(stack_.size() - 2);
                break;
            }
            case 'a': {  // APPEND
                need(2);
                add_items(stack_[stack_.size() - 2], Type::list, stack_.size() - 1, 1);
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
            case '1': stack_.resize(pop_mark()); break;                   // POP_MARK
            case '2': need(1); push(stack_.back()); break;                // DUP
            case '.':                                                     // STOP
                need(1);
                doc_.root_ = stack_.back();
                return std::move(doc_);
            default: refuse(op);
            }
        }
    }

private:
    [[noreturn]] void fail(const std::string& why) { throw Error(name_, op_at_, why); }

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

    // More input, if a producer is still writing it: true once n bytes from p_ exist.
    bool refill(uint64_t n) {
        if (!more_) return false;
        const uint64_t want = uint64_t(p_ - begin_) + n;
        if (want > (uint64_t(1) << 48)) return false;
        end_ = begin_ + more_->wait(size_t(want));
        return uint64_t(end_ - p_) >= n;
    }

    const uint8_t* take(uint64_t n) {
        if (n > uint64_t(end_ - p_) && !refill(n)) fail("pickle cut short inside an opcode's argument");
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
        return Ref(doc_.values_.size() - 1);
    }
    void push(Ref r) { stack_.push_back(r); }
    void need(size_t n) {
        size_t floor = marks_.empty() ? 0 : marks_.back();
        if (stack_.size() < floor + n) fail("pickle stack underflow");
    }
    void push_int(int64_t v) {
        if (v >= -(int64_t(1) << 30) && v < (int64_t(1) << 30)) return push(kImmediate | (uint32_t(v) & ~kImmediate));
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
        const uint8_t* b = take(n);
        if (n > 0xFFFFFFFFu || b - begin_ > 0xFFFFFFFFll) fail("string too long or too far into the input");
        Ref r = make(t);
        doc_.values_[r].off = uint32_t(b - begin_);
        doc_.values_[r].len = uint32_t(n);
        push(r);
    }
    // Little-endian two's complement, as LONG1/LONG4 store it. Addresses need up to 9 bytes
    // (a top bit set in 8 bytes is followed by a 0 sign byte); wider ones stay unusable.
    void long_le(uint64_t n) {
        const uint8_t* b = take(n);
        Ref r = make(Type::integer);
        if (n == 0) {
            push(r);
            return;
        }
        const bool negative = b[n - 1] & 0x80;
        uint64_t v = negative ? ~uint64_t(0) : 0;
        const uint64_t used = n < 8 ? n : 8;
        for (uint64_t k = 0; k < used; ++k) {
            v &= ~(uint64_t(0xff) << (8 * k));
            v |= uint64_t(b[k]) << (8 * k);
        }
        for (uint64_t k = 8; k < n; ++k)
            if (b[k] != (negative ? 0xff : 0x00)) doc_.values_[r].type = Type::big_integer;
        // Positive values in [2^63, 2^64) keep their bits; readers of addresses take them as uint64.
        if (doc_.values_[r].type == Type::integer && int64_t(v) >= -(int64_t(1) << 30) && int64_t(v) < (int64_t(1) << 30)) {
            doc_.values_.pop_back();  // small after all: no storage needed
            return push(kImmediate | (uint32_t(v) & ~kImmediate));
        }
        doc_.values_[r].i = int64_t(v);
        push(r);
    }
    size_t line_end() {
        while (true) {
            const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', size_t(end_ - p_)));
            if (nl) return size_t(nl - p_);
            if (!refill(uint64_t(end_ - p_) + 1)) fail("pickle cut short inside a text argument");
        }
    }
    std::string take_line() {
        size_t n = line_end();
        std::string s(reinterpret_cast<const char*>(p_), n);
        p_ += n + 1;
        return s;
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
        if (idx > (1u << 28)) fail("memo index out of range");
        if (idx >= memo_.size()) memo_.resize(idx + 1, kNoRef);
        if (memo_[idx] == kNoRef) ++memo_count_;  // MEMOIZE's index is the memo's size
        memo_[idx] = stack_.back();
    }
    void memo_get(uint64_t idx) {
        if (idx >= memo_.size() || memo_[idx] == kNoRef) fail("memo index " + std::to_string(idx) + " was never stored");
        push(memo_[idx]);
    }
    size_t pop_mark() {
        if (marks_.empty()) fail("pickle MARK missing");
        size_t m = marks_.back();
        marks_.pop_back();
        return m;
    }
    void tuple_of(size_t n) {
        need(n);
        Ref t = make(Type::tuple);
        add_items(t, Type::tuple, stack_.size() - n, n);
        stack_.resize(stack_.size() - n);
        push(t);
    }
    void add_from_mark(Ref container, Type t, size_t arity) {
        size_t m = pop_mark();
        size_t n = stack_.size() - m;
        if (n % arity) fail("odd number of items for a dict");
        add_items(container, t, m, n);
        stack_.resize(m);
    }
    void add_to_container_below_mark(Type t, size_t arity) {
        size_t m = pop_mark();
        if (m == (marks_.empty() ? 0 : marks_.back())) fail("pickle stack underflow");
        size_t n = stack_.size() - m;
        if (n % arity) fail("odd number of items for a dict");
        add_items(stack_[m - 1], t, m, n);
        stack_.resize(m);
    }
    // Appends stack_[from, from+n) to a container as one batch.
    void add_items(Ref container, Type want, size_t from, size_t n) {
        if ((container & kImmediate) || doc_.values_[container].type != want)
            fail("pickle adds items to a value of the wrong type");
        if (n == 0) return;
        Document::Batch b;
        b.count = uint32_t(n);
        b.begin = shared_batch(from, n, want);
        doc_.batches_.push_back(b);
        uint32_t id = uint32_t(doc_.batches_.size() - 1);
        Value& cc = doc_.values_[container];
        if (cc.first == 0) cc.first = id;
        else doc_.batches_[cc.last].next = id;
        cc.last = id;
        cc.len += uint32_t(want == Type::dict ? n / 2 : n);
    }

    // Batches are never changed once written, so equal ones can share their items: the same
    // stack's frame list appears in every allocation made there. A direct-mapped cache keyed by
    // the list's ends finds most repeats (memcmp confirms); a miss only costs the copy it would
    // have cost anyway. Dict batches hold fresh values each time and are not worth a look.
    uint32_t shared_batch(size_t from, size_t n, Type type) {
        const Ref* items = stack_.data() + from;
        CachedBatch* c = nullptr;
        if (type == Type::list && n >= 4) {
            const uint64_t h = (uint64_t(items[0]) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(items[1]) * 0xC2B2AE3D27D4EB4Full) ^
                               (uint64_t(items[n - 1]) * 0x165667B19E3779F9ull) ^ (uint64_t(items[n - 2]) << 17) ^ n;
            c = &batch_cache_[size_t(h >> 48)];
            if (c->hash == h && c->count == n && std::memcmp(doc_.items_.data() + c->begin, items, n * sizeof(Ref)) == 0)
                return c->begin;
            *c = {h, uint32_t(doc_.items_.size()), uint32_t(n)};
        }
        const uint32_t begin = uint32_t(doc_.items_.size());
        doc_.items_.insert(doc_.items_.end(), items, items + n);
        return begin;
    }

    static constexpr Ref kNoRef = 0xFFFFFFFFu;
    struct CachedBatch {
        uint64_t hash;
        uint32_t begin, count;
    };
    std::vector<CachedBatch> batch_cache_ = std::vector<CachedBatch>(1 << 16);
    const uint8_t* p_;
    const uint8_t* begin_;
    const uint8_t* end_;  // of what is available so far
    GrowingInput* more_;
    const std::string& name_;
    size_t op_at_ = 0;
    Document doc_;
    std::vector<Ref> stack_;
    std::vector<size_t> marks_;
    BigVector<Ref> memo_;
    uint64_t memo_count_ = 0;
};

Document parse(std::string_view bytes, const std::string& name) {
    return Parser(bytes.data(), bytes.size(), nullptr, name).run();
}

Document parse(const char* base, GrowingInput& input, const std::string& name) {
    return Parser(base, 0, &input, name).run();
}

}  // namespace vramscope::pickle
