// A reader of Python pickles that understands the data opcodes only. An opcode that would import
// or call anything (GLOBAL, REDUCE, BUILD, NEWOBJ, ...) stops the parse with an error: a snapshot
// from a stranger can never run code here. Input comes in chunks and is not kept: strings are
// copied into the Document, so a gzip'd snapshot never needs its whole decompressed size in memory.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/gzip_stream.h"
#include "common/limits.h"
#include "importers/pickle_direct.h"

namespace vramscope::pickle {

class Error : public std::runtime_error {
public:
    Error(const std::string& name, size_t offset, const std::string& why)
        : std::runtime_error(name + ": offset " + std::to_string(offset) + ": " + why), offset(offset) {}
    size_t offset;
};

// `forgotten`: a value a Sink took and let go, met again through the memo; `token`: one it
// replaced by a number of its own (Value::i), to know it by when met again (see Sink).
enum class Type : uint8_t { none, boolean, integer, big_integer, floating, string, bytes, forgotten, token, list, tuple, dict, set };

// Index of a value in its Document, or, with the top bit set, a small integer held in the Ref
// itself: snapshots hold millions of small ints (sizes, lines, streams) that need no storage.
inline constexpr Ref kImmediate = 0x80000000u;
inline constexpr Ref kForgotten = 0xFFFFFFFEu;  // never an immediate: -1 and -2 are stored as values

// 16 bytes: a large snapshot decodes into tens of millions of these.
struct Value {
    union {
        int64_t i;       // integer, boolean, token
        double f;        // floating
        uint32_t off;    // string/bytes: offset of the payload in the Document's text
        struct {
            uint32_t first, last;  // container: first and last batch (0: empty)
        };
    };
    uint32_t len = 0;    // string/bytes length; container item count (dict: pairs)
    Type type = Type::none;
    Value() : i(0) {}
};

class Document {
public:
    Ref root() const { return root_; }
    Value operator[](Ref r) const {
        if (!(r & kImmediate)) return values_[r];
        Value v;
        v.type = r == kForgotten ? Type::forgotten : Type::integer;
        v.i = int64_t(int32_t(r << 1) >> 1);  // sign-extend the low 31 bits
        return v;
    }

    // Calls f(item) for each item of a container (a dict's keys and values alternate), f(key, value)
    // for each dict pair. Nothing for other values.
    template <class F> void for_each_item(Ref container, F&& f) const {
        if ((container & kImmediate) || values_[container].type < Type::list) return;
        for (uint32_t b = values_[container].first; b != 0; b = batches_[b].next)
            for (uint32_t k = 0; k < batches_[b].count; ++k) f(items_[batches_[b].begin + k]);
    }
    template <class F> void for_each_pair(Ref dict, F&& f) const {
        if ((dict & kImmediate) || values_[dict].type != Type::dict) return;
        for (uint32_t b = values_[dict].first; b != 0; b = batches_[b].next)
            for (uint32_t k = 0; k + 1 < batches_[b].count; k += 2)
                f(items_[batches_[b].begin + k], items_[batches_[b].begin + k + 1]);
    }
    // The value under a string key of a dict, if there is one.
    std::optional<Value> get(Ref dict, std::string_view key, Ref* out_ref = nullptr) const;
    std::string_view str(Ref r) const { return {text_.data() + values_[r].off, values_[r].len}; }

private:
    friend class Parser;
    struct Batch {
        uint32_t begin = 0, count = 0, next = 0;
    };
    std::vector<char> text_;  // string and bytes payloads
    std::vector<Value> values_;
    std::vector<Batch> batches_{1};  // batch 0 is the "none" sentinel
    std::vector<Ref> items_;
    Ref root_ = 0;
};

// What a Sink lets the parser drop of the values it took.
struct Release {
    std::vector<Ref> forget;                        // a later GET yields `forgotten` (a token stays)
    std::vector<std::pair<Ref, int64_t>> as_token;  // a later GET yields a `token` holding the number
    void clear() { forget.clear(), as_token.clear(); }
};

// Receives items as they are appended to lists, before the list stores them: an importer can
// turn a million records into its own form as they complete, and the parser then reuses their
// memory instead of holding the whole document.
class Sink {
public:
    virtual ~Sink() = default;
    // The fast path, for the later batches of a list whose items take() took: decode the items
    // that follow straight from `in` (a DirectInput: the bytes and the memo), as many as it can,
    // stopping before the first it cannot read, with `in.p` at that item and the memo as it was
    // before it; returns how many it took. The parser reads the rest the generic way.
    virtual size_t take_direct(DirectInput& /*in*/, Ref /*list*/) { return 0; }
    // Gets batches of one or more items; `offset` is where the opcode that completed the batch
    // begins, for messages. Return true to take the items (the list then only counts them); put
    // in `release` the values taken that the parser may drop or replace by a token. A reader
    // that needs the content of a `forgotten` value throws NeedsWholeDocument.
    virtual bool take(const Document& doc, Ref list, const Ref* items, size_t n, size_t offset, Release& release) = 0;
    // Values from `first` on were dropped or moved: drop whatever is keyed by such refs.
    virtual void reclaimed(Ref first) = 0;
};

// A reader met a `forgotten` value whose content it needs: parse again without the sink.
struct NeedsWholeDocument {};

// Parses bytes (not a file name: `name` is only for messages). Throws pickle::Error, also when
// bytes follow the STOP opcode or a limit is passed (strings, open containers, values held).
Document parse(std::string_view bytes, const std::string& name, Sink* sink = nullptr, const ReadLimits& limits = {});

// Parses input that arrives in chunks, `first` and then whatever `rest` gives (a GzipStream),
// which is read to its end: a gzip stream's checksum and length are checked after the STOP.
Document parse(std::string_view first, ChunkSource& rest, const std::string& name, Sink* sink = nullptr,
               const ReadLimits& limits = {});

}  // namespace vramscope::pickle
