// Reads JSON that someone else may have written: a findings file (given to `report`, a compare
// cell's, Python's), a trace's owners file. Strict RFC 8259, nesting and size bounded, and every error names the file and the
// byte offset; nothing is evaluated, and the values keep their place in the text so that a valid
// part can be embedded as it was written.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/limits.h"
#include "findings/findings.h"

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
// small multiple of what the caller looks at, not of the text, and what is kept may not pass
// `max_held_bytes` (--max-memory): a value kept costs about a hundred bytes, however short its text.
JsonValue parse_json(std::string_view text, const std::string& name, unsigned keep_depth,
                     unsigned max_depth = kMaxJsonDepth, uint64_t max_held_bytes = ReadLimits{}.max_held_bytes);

// A findings JSON (`analyze --json`: one run, or {"runs": [...], "ranks": {...}}) back into the
// findings it was written from: to_json of the result is the text again. The one reader of
// findings: `report`, compare's cells and Python all come here. A field left out keeps its
// default; one of the wrong type, a number that is not finite or out of range, or a word outside
// the vocabulary throws, naming the file and the field.
struct FindingsFile {
    std::vector<Findings> runs;
    RankComparison ranks;
};
FindingsFile read_findings(std::string_view text, const std::string& name, const ReadLimits& limits = {});

// Who held each leak joined to the findings: the one place owners meet leaks (terminal, JSON, HTML
// and compare's root-cause chain all read the result). `owners_json` is a TRACE.owners.json, a
// list of python/vramscope/owners/leaks.py explained() answers; each goes to the leak of the
// same device and site. Throws naming the file when it is not such a list.
void attach_owners(Findings& f, std::string_view owners_json, const std::string& name);

// The report page's data from findings files (read_findings): each file's runs, and the ranks of
// the first that has them.
std::string report_data_from_findings(const std::vector<std::string>& texts, const std::vector<std::string>& names);

}  // namespace vramscope
