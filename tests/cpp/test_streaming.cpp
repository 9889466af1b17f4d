// The streaming analysis against what the analysis said before it streamed (tests/data/findings:
// each fixture's findings written by the whole-trace analysis it replaced), and a file read as it
// is analysed against the same trace in memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "analysis/analyze.h"
#include "cli/cli.h"
#include "findings/json.h"
#include "importers/torch_snapshot.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "recorded_fixtures.h"
#include "trace_builder.h"

using namespace vramscope;
namespace fs = std::filesystem;

namespace {
const fs::path kData = VRAMSCOPE_TEST_DATA;

// The findings without what differs from run to run or by path: timings and the source's name.
std::string comparable(std::string json) {
    while (!json.empty() && json.back() == '\n') json.pop_back();
    json = std::regex_replace(json, std::regex(R"(,"import_seconds":[^,}]*,"analysis_seconds":[^,}]*)"), "");
    return std::regex_replace(json, std::regex(R"("source":"[^"]*")"), "");
}

// Where two texts first differ, for the failure message.
std::string first_difference(const std::string& a, const std::string& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    const size_t from = i > 80 ? i - 80 : 0;
    return "at " + std::to_string(i) + ":\n  " + a.substr(from, 160) + "\n  " + b.substr(from, 160);
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string stem(const fs::path& p) { return p.filename().string().substr(0, p.filename().string().size() - 10); }

// A loop with markers (or none: its steps are then inferred from its period): parameters,
// activations freed within the step, and a leak of 1 MiB a step.
Trace marked_loop(int steps, bool markers = true) {
    vramscope::testing::TraceBuilder b;
    const uint32_t params = b.stack({{"/home/u/train.py", 5, "build_model"}});
    const uint32_t act = b.stack({{"/home/u/model.py", 12, "forward"}, {"/home/u/train.py", 25, "train"}});
    const uint32_t leak = b.stack({{"/home/u/train.py", 27, "train"}});
    b.segment(0x1000000000, 1ull << 30);
    b.alloc(0x1000000000, 64 << 20, params);
    for (int s = 0; s < steps; ++s) {
        const uint64_t base = 0x2000000000 + uint64_t(s) * 0x10000000;
        b.alloc(base, 8 << 20, act);
        b.alloc(base + 0x1000000, 1 << 20, leak);
        b.free(base, 8 << 20);
        if (markers) b.step();
    }
    return b.t;
}
}  // namespace

TEST(Streaming, FindingsOfEveryFixtureAreThoseOfThePreviousAnalysis) {
    size_t checked = 0;
    for (const fs::path& f : vramscope::testing::recorded_snapshots()) {
        for (uint32_t window : {1u, 2u}) {
            const fs::path golden = kData / "findings" / (stem(f) + (window == 1 ? ".json" : ".window2.json"));
            AnalysisOptions opt;
            opt.judge.window = window;
            const std::string got = comparable(to_json(analyze_file(f.string(), opt))), want = comparable(read_text(golden));
            EXPECT_TRUE(got == want) << golden << " " << first_difference(got, want);
            ++checked;
        }
    }
    EXPECT_EQ(checked, 38u);
}

TEST(Streaming, AFileReadAsItIsAnalysedSaysWhatTheTraceInMemorySays) {
    // Per process: two test runs on one machine (CI beside a developer's) must not share it.
    const fs::path dir = fs::temp_directory_path() / ("vramscope_streaming_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // Converted snapshots (steps guessed from the optimizer's annotations as they pass), a
    // live-like trace (markers), and one whose steps only its period tells (the file is read a
    // second time), in small chunks so that many chunk boundaries pass.
    std::vector<std::pair<std::string, Trace>> traces;
    for (const fs::path& f : vramscope::testing::recorded_snapshots()) traces.emplace_back(stem(f), load_any(f.string()));
    traces.emplace_back("marked_loop", marked_loop(40));
    traces.emplace_back("unmarked_loop", marked_loop(40, false));
    for (auto& [name, t] : traces) {
        const std::string path = (dir / (name + ".vscope")).string();
        write_trace(t, path, 4096);
        const Trace back = read_trace(path);
        for (uint32_t window : {1u, 3u}) {
            AnalysisOptions opt;
            opt.judge.window = window;
            EXPECT_EQ(comparable(to_json(analyze_file(path, opt))), comparable(to_json(analyze(back, opt)))) << name;
        }
    }
    fs::remove_all(dir);
}

TEST(Streaming, AStepRangeIsJudgedAsATraceThatEndsThere) {
    const Trace t = marked_loop(60);
    AnalysisOptions range;
    range.first_step = 20;
    range.last_step = 39;
    const Findings f = analyze(t, range);
    EXPECT_EQ(f.step_count, 40u);
    EXPECT_EQ(f.warmup_steps, 20u);
    ASSERT_EQ(f.leaks.size(), 1u);
    EXPECT_NEAR(f.leaks[0].bytes_per_step, double(1 << 20), 1.0);
    EXPECT_EQ(f.devices[0].timeline.size(), 40u);
    // The same as the trace cut after step 39's marker, judged from step 20.
    Trace cut = t;
    size_t markers = 0;
    for (size_t i = 0; i < cut.events.size(); ++i)
        if (cut.events[i].kind == EventKind::step && ++markers == 40) {
            cut.events.resize(i + 1);
            break;
        }
    AnalysisOptions from20;
    from20.judge.warmup = 20;
    EXPECT_EQ(comparable(to_json(f)), comparable(to_json(analyze(cut, from20))));
    // And read from a file, which stops reading there.
    const fs::path path = fs::temp_directory_path() / ("vramscope_range_" + std::to_string(::getpid()) + ".vscope");
    write_trace(t, path.string(), 4096);
    EXPECT_EQ(comparable(to_json(analyze_file(path.string(), range))), comparable(to_json(analyze(read_trace(path.string()), range))));
    // Steps from the optimizer's annotations, each extended to its zero_grad(): the range ends
    // where the file is no longer read.
    write_trace(load_any((kData / "leak_ctx_losses.pickle.gz").string()), path.string(), 4096);
    AnalysisOptions middle;
    middle.first_step = 5;
    middle.last_step = 24;
    const Findings streamed = analyze_file(path.string(), middle);
    EXPECT_EQ(streamed.step_count, 25u);
    EXPECT_EQ(comparable(to_json(streamed)), comparable(to_json(analyze(read_trace(path.string()), middle))));
    fs::remove(path);
}

TEST(Streaming, InputsAnalysedSideBySideAreEachAsAnalysedAlone) {
    std::vector<std::string> paths;
    for (const fs::path& f : vramscope::testing::recorded_snapshots()) paths.push_back(f.string());
    const CommandOptions options;
    const Analysis together = analyze_inputs(paths, options);
    ASSERT_EQ(together.runs.size(), paths.size());
    for (size_t k = 0; k < paths.size(); ++k) {
        EXPECT_EQ(together.files[k], paths[k]);
        EXPECT_EQ(comparable(to_json(together.runs[k])), comparable(to_json(analyze_file(paths[k], options.analysis))))
            << paths[k];
    }
    // The first failure by the inputs' order is the one said, whichever thread met it first.
    const std::vector<std::string> broken{paths[0], (kData / "no_such_trace.vscope").string(), "/no/such/either.vscope"};
    try {
        analyze_inputs(broken, options);
        ADD_FAILURE() << "analysed inputs that do not exist";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("no_such_trace.vscope"), std::string::npos) << e.what();
    }
}
