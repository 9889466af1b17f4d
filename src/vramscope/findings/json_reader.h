// Reads JSON that someone else may have written: a findings file given to `report`, a trace's
// owners file. Strict RFC 8259, nesting and size bounded, and every error names the file and the
// byte offset; nothing is evaluated, and the values keep their place in the text so that a valid
// part can be embedded as it was written.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramscope {

struct JsonValue {
    enum class Type : uint8_t { null, boolean, number, string, array, object } type = Type::null;
    std::string_view text;                 // the value as written (strings: with their quotes)
    std::string str;                       // a string's content, unescaped
    std::vector<JsonValue> items;          // array items; object values
    std::vector<std::string> keys;         // object keys, one per item
    const JsonValue* get(std::string_view key) const;  // an object's member, if there is one
};

inline constexpr unsigned kMaxJsonDepth = 64;

// Throws std::runtime_error("NAME: offset N: why"). `text` must outlive the result. Values
// nested `keep_depth` or more levels down are checked but their items not kept: memory stays a
// small multiple of what the caller looks at, not of the text.
JsonValue parse_json(std::string_view text, const std::string& name, unsigned keep_depth,
                     unsigned max_depth = kMaxJsonDepth);

// The report page's data from findings files (`analyze --json`, one run or several): each file's
// runs, and the ranks of the first that has them. Throws naming the file when one is not a
// findings JSON (its root, "runs" or "ranks" of the wrong shape).
std::string report_data_from_findings(const std::vector<std::string>& texts, const std::vector<std::string>& names);

}  // namespace vramscope
