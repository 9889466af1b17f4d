// libFuzzer: any bytes through the pickle reader and the snapshot importer and analysis must end
// in a result or a clean error, never a crash, hang or out-of-bounds access.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "analysis/analyze.h"
#include "importers/torch_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        vramscope::Trace t = vramscope::import_torch_snapshot(
            std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pickle");
        vramscope::analyze(t);
    } catch (const std::runtime_error&) {
    }
    return 0;
}
