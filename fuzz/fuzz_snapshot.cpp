// libFuzzer: any bytes as a user's input file, end to end: told by content (gzip, pickle,
// .vscope), imported with the streaming sink, validated, analysed, rendered (terminal, JSON,
// HTML) and exported to memory_viz, whose pickle is read back (export-then-analyze is where an
// empty list once crashed the importer). Limits are small so that a bomb ends quickly: each must
// end in a result or a clean error, never a crash, a hang or an allocation past the limits.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "analysis/analyze.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "render/terminal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace vramscope;
    ReadLimits limits;
    limits.max_decoded_bytes = 64 << 20;
    limits.max_held_bytes = 64 << 20;
    limits.max_string_bytes = 1 << 20;
    try {
        const Trace t = load_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.input", limits);
        const Findings f = analyze(t);
        render_summary(f, true);
        render_html({f}, {});
        to_json(f, limits.max_held_bytes);
        if (t.faults.empty()) {
            const Trace back = load_bytes(to_memory_viz_pickle(t), "fuzz.export.pickle", limits);
            analyze(back);
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
