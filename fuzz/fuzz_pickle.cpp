// libFuzzer: any bytes through the pickle reader, the snapshot importer (with its streaming sink)
// and analysis must end in a result or a clean error, never a crash, hang or out-of-bounds access.
// The first byte cuts the rest into chunks of that many bytes (0: one piece), so arguments that
// straddle chunks, as they do in a gzip stream, get exercised too.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "analysis/analyze.h"
#include "common/gzip_stream.h"
#include "importers/pickle.h"
#include "importers/torch_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        if (data[0] == 0) {
            vramscope::analyze(vramscope::load_bytes(bytes, "fuzz.pickle"));  // import, then validation
        } else {
            vramscope::FixedChunks pieces(bytes, data[0]);
            const std::string_view first = pieces.first();
            vramscope::pickle::parse(first, pieces, "fuzz.pickle");
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
