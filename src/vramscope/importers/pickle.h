// A reader of Python pickles that understands the data opcodes only. An opcode that would import
// or call anything (GLOBAL, REDUCE, BUILD, NEWOBJ, ...) stops the parse with an error: a snapshot
// from a stranger can never run code here. Strings point into the input buffer, which must
// outlive the Document.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vramscope::pickle {

class Error : public std::runtime_error {
public:
    Error(const std::string& name, size_t offset, const std::string& why)
        : std::runtime_error(name + ": offset " + std::to_string(offset) + ": " + why), offset(offset) {}
    size_t offset;
};

enum class Type : uint8_t { none, boolean, integer, big_integer, floating, string, bytes, list, tuple, dict, set };

using Ref = uint32_t;  // index of a value in its Document

struct Value {
    Type type = Type::none;
    union {
        int64_t i;
        double f;
    };
    const char* data = nullptr;  // string/bytes payload
    uint32_t len = 0;            // string/bytes length; container item count (dict: pairs)
    uint32_t first = 0, last = 0;// container: first and last batch (0: empty)
    Value() : i(0) {}
};

class Document {
public:
    Ref root() const { return root_; }
    const Value& operator[](Ref r) const { return values_[r]; }
    size_t value_count() const { return values_.size(); }

    // Calls f(item) for each item of a list/tuple/set, f(key, value) for each dict pair.
    template <class F> void for_each_item(Ref container, F&& f) const {
        for (uint32_t b = values_[container].first; b != 0; b = batches_[b].next)
            for (uint32_t k = 0; k < batches_[b].count; ++k) f(items_[batches_[b].begin + k]);
    }
    template <class F> void for_each_pair(Ref dict, F&& f) const {
        for (uint32_t b = values_[dict].first; b != 0; b = batches_[b].next)
            for (uint32_t k = 0; k + 1 < batches_[b].count; k += 2)
                f(items_[batches_[b].begin + k], items_[batches_[b].begin + k + 1]);
    }
    // The value under a string key of a dict, or nullptr.
    const Value* get(Ref dict, std::string_view key, Ref* out_ref = nullptr) const;
    std::string_view str(Ref r) const { return {values_[r].data, values_[r].len}; }

private:
    friend class Parser;
    struct Batch {
        uint32_t begin = 0, count = 0, next = 0;
    };
    std::vector<Value> values_;
    std::vector<Batch> batches_{1};  // batch 0 is the "none" sentinel
    std::vector<Ref> items_;
    Ref root_ = 0;
};

// Parses bytes (not a file name: `name` is only for messages). Throws pickle::Error.
Document parse(std::string_view bytes, const std::string& name);

}  // namespace vramscope::pickle
