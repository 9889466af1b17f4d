// The Python face of the C++ core: the CLI and analysis, nothing else crosses here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "analysis/analyze.h"
#include "cli/cli.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "trace/writer.h"

namespace nb = nanobind;
using namespace vramscope;

NB_MODULE(_core, m) {
    m.attr("__version__") = VRAMSCOPE_VERSION;
    m.def(
        "cli_main",
        [](const std::vector<std::string>& args) {
            nb::gil_scoped_release release;
            return run_cli(args);
        },
        nb::arg("args"), "Run the vramscope command line; returns the exit code.");
    m.def(
        "analyze_json",
        [](const std::string& path, uint32_t window, int warmup, uint64_t device_memory) {
            nb::gil_scoped_release release;
            AnalysisOptions opt;
            opt.window = window;
            opt.warmup_steps = warmup;
            opt.device_memory = device_memory;
            return to_json(analyze(load_any(path), opt));
        },
        nb::arg("path"), nb::arg("window") = 1, nb::arg("warmup") = -1, nb::arg("device_memory") = 0,
        "Analyse a trace or torch snapshot; returns the findings JSON.");
    m.def(
        "convert",
        [](const std::string& in, const std::string& out) {
            nb::gil_scoped_release release;
            write_trace(load_any(in), out);
        },
        nb::arg("source"), nb::arg("destination"), "Convert a torch snapshot to a .vscope trace.");
}
