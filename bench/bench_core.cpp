// Times each stage of `vramscope analyze` on one input, best of N runs:
//   bench_core FILE [runs]     FILE: a torch snapshot (.pickle[.gz]) or a .vscope trace
// Prints one line per stage with seconds and events/s, and the .vscope size per event.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "analysis/analyze.h"
#include "common/file.h"
#include "common/gzip_stream.h"
#include "importers/pickle.h"
#include "importers/torch_snapshot.h"
#include "trace/reader.h"
#include "trace/writer.h"

using namespace vramscope;

static double best_of(int runs, const std::function<void()>& f) {
    double best = 1e9;
    for (int i = 0; i < runs; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_core FILE [runs]\n");
        return 2;
    }
    const std::string path = argv[1];
    const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
    const Bytes file = read_file(path);
    const std::string_view raw = view(file);
    Bytes decompressed;
    std::string_view bytes = raw;
    double t_gunzip = 0;
    if (is_gzip(raw)) {
        t_gunzip = best_of(runs, [&] { decompressed = gunzip(raw, path); });
        bytes = view(decompressed);
    }
    Trace trace;
    double t_parse = 0, t_import = 0;
    if (looks_like_pickle(bytes)) {
        t_parse = best_of(runs, [&] { pickle::parse(bytes, path); });
        t_import = best_of(runs, [&] { trace = import_torch_snapshot(bytes, path); });
    } else {
        t_import = best_of(runs, [&] { trace = parse_trace(bytes, path); });
    }
    const double events = double(trace.entry_count());  // as torch counts them
    Findings f;
    const double t_analyze = best_of(runs, [&] { f = analyze(trace); });
    const double t_end_to_end = best_of(runs, [&] { analyze_file(path); });

    const std::string vscope = path + ".bench.vscope";
    write_trace(trace, vscope);
    const Bytes vfile = read_file(vscope);
    const std::string_view vbytes = view(vfile);
    Trace vt;
    const double t_vread = best_of(runs, [&] { vt = parse_trace(vbytes, vscope); });
    const double t_vscope_end_to_end = best_of(runs, [&] { analyze_file(vscope); });  // streamed
    std::remove(vscope.c_str());

    auto line = [&](const char* what, double s) {
        std::printf("%-44s %8.4f s  %7.2f M events/s\n", what, s, s > 0 ? events / s / 1e6 : 0.0);
    };
    std::printf("input %s: %zu bytes, %.0f events, verdict %s\n", path.c_str(), raw.size(), events, std::string(name(f.verdict)).c_str());
    if (t_gunzip) line("gunzip", t_gunzip);
    if (t_parse) line("pickle parse (data opcodes)", t_parse);
    line("import (parse + build events)", t_import);
    line("analysis", t_analyze);
    line("end to end: analyze FILE", t_end_to_end);
    line(".vscope read", t_vread);
    line("end to end: analyze FILE.vscope (streamed)", t_vscope_end_to_end);
    std::printf("%-44s %8.2f bytes/event (.vscope), %.2f bytes/event (input file)\n", "size", double(vbytes.size()) / events,
                double(raw.size()) / events);
    return 0;
}
