// libFuzzer: any bytes as a findings JSON given to `vramscope report`, and as a trace's owners
// file: the reader must end in the page or a clean error naming the offset, never a crash, a
// stack overflow (nesting is bounded) or memory out of proportion to the runs it keeps.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "findings/json_reader.h"
#include "render/html.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace vramscope;
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        parse_json(text, "fuzz.owners.json", 0);
    } catch (const std::runtime_error&) {
    }
    try {
        report_page(report_data_from_findings({text}, {"fuzz.json"}), "fuzz");
    } catch (const std::runtime_error&) {
    }
    return 0;
}
