// libFuzzer: any bytes as what `vramscope compare-table` reads, a compare.json and the cells'
// findings it names, through the statuses and every table (terminal, Markdown, JSON, HTML). The
// input is compare.json, then up to two findings files after each "\0CELL\0", written as a.json
// and b.json beside it (the seeds name those). It must end in the tables or a clean error naming
// the file, never a crash, undefined behaviour or a status from numbers that are not numbers.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "compare/cells.h"
#include "compare/table.h"

namespace {

const std::string& scratch_dir() {
    static const std::string dir = [] {
        char name[] = "/tmp/fuzz-compare-XXXXXX";
        if (!mkdtemp(name)) std::abort();
        return std::string(name);
    }();
    return dir;
}

void write(const std::string& path, std::string_view bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace vramscope;
    static constexpr std::string_view kCell("\0CELL\0", 6);
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    const std::string& dir = scratch_dir();
    const char* names[] = {"compare.json", "a.json", "b.json"};
    for (const char* file : names) {
        const size_t cut = std::min(rest.find(kCell), rest.size());
        write(dir + "/" + file, rest.substr(0, cut));
        rest.remove_prefix(std::min(rest.size(), cut + kCell.size()));
    }
    try {
        const CompareRun run = read_compare(dir + "/compare.json");
        render_compare_terminal(run);
        render_compare_markdown(run);
        render_compare_json(run);
        render_compare_html(run);
    } catch (const std::runtime_error&) {
    }
    return 0;
}
