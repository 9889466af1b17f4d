// End to end on the real snapshots recorded on a GPU (tests/data/record_fixtures.py): the verdict,
// the leak rate against torch.cuda.memory_allocated() per step, and the site.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "analysis/analyze.h"
#include "analysis/fit.h"
#include "importers/torch_snapshot.h"
#include "render/terminal.h"
#include "trace/reader.h"
#include "trace/writer.h"
#include "recorded_fixtures.h"

using namespace vramscope;
namespace fs = std::filesystem;

namespace {

struct Truth {
    std::string verdict;
    double leak_bytes_per_step = 0;
    std::vector<double> allocated;  // torch.cuda.memory_allocated() after each step of the run
    std::string shape;              // the leak's expected shape, where the truth names one
    std::string leak_function;
    long leak_line = 0;
    std::string leak_stream;
    std::string kind;               // "survivors" or "replacement" (a buffer replaced by a bigger one)
    bool optimizer = true;          // steps end at optimizer.step(); else the snapshot's period finds them
};

// The truth files are JSON written by the recording script; these few fields are read with
// regexes so the tests need no JSON library.
Truth read_truth(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string s = ss.str();
    Truth t;
    std::smatch m;
    auto find = [&](const char* pattern) {
        std::smatch m;
        return std::regex_search(s, m, std::regex(pattern)) ? m[1].str() : std::string();
    };
    t.verdict = find(R"re("verdict":\s*"([a-z-]+)")re");
    const std::string rate = find(R"re("leak_bytes_per_step":\s*([0-9.eE+-]+))re");
    t.leak_bytes_per_step = rate.empty() ? 0 : std::stod(rate);
    t.leak_function = find(R"re("leak_site":\s*\{[^}]*"function":\s*"([^"]*)")re");
    const std::string line = find(R"re("leak_site":\s*\{[^}]*"line":\s*([0-9]+))re");
    t.leak_line = line.empty() ? 0 : std::stol(line);
    t.leak_stream = find(R"re("leak_stream":\s*"([a-z]+)")re");
    t.shape = find(R"re("shape":\s*"([a-z-]+)")re");
    t.kind = find(R"re("kind":\s*"([a-z]+)")re");
    const std::string unit = find(R"re("unit":\s*"([^"]+)")re");
    t.optimizer = unit.empty() || unit == "optimizer step";
    std::regex step(R"("allocated":\s*([0-9]+))");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), step); it != std::sregex_iterator(); ++it)
        t.allocated.push_back(std::stod((*it)[1]));
    return t;
}

// What memory_allocated() grew by per step over the steps the analysis judged: the trace's step k
// is the run's step steps_before_trace + k; a least-squares slope, as the analysis fits.
double measured_rate(const Truth& truth, const Findings& f) {
    const size_t first = f.steps_before_trace + f.warmup_steps, last = f.steps_before_trace + f.step_count - 1;
    return fit_line(truth.allocated, first, std::min(last, truth.allocated.size() - 1)).slope;
}

}  // namespace

TEST(Fixtures, EveryRecordedSnapshotGivesTheRecordedTruth) {
    const auto files = vramscope::testing::recorded_snapshots();
    ASSERT_GE(files.size(), 5u) << "fixtures missing under " << VRAMSCOPE_TEST_DATA;
    for (const fs::path& file : files) {
        SCOPED_TRACE(file.filename().string());
        std::string stem = file.filename().string();
        stem.resize(stem.size() - std::string(".pickle.gz").size());
        const Truth truth = read_truth(file.parent_path() / (stem + ".truth.json"));
        ASSERT_FALSE(truth.verdict.empty());
        Findings f = analyze(load_any(file.string()));
        EXPECT_EQ(name(f.verdict), truth.verdict);
        EXPECT_EQ(f.steps_source, truth.optimizer ? StepsSource::optimizer_annotations : StepsSource::inferred_period);
        for (const DeviceLedger& l : f.ledger) EXPECT_TRUE(l.balanced()) << l.part(LedgerPart::unexplained);
        if (truth.verdict != "leak") {
            EXPECT_TRUE(f.leaks.empty());
            continue;
        }
        // Within 10% of what torch.cuda.memory_allocated() grew by per step in the recording run.
        const double measured = measured_rate(truth, f);
        EXPECT_NEAR(f.leak_bytes_per_step, measured, 0.10 * measured);
        ASSERT_FALSE(f.leaks.empty());
        const SiteFinding& top = f.leaks.front();
        EXPECT_TRUE(top.site.file.ends_with("record_fixtures.py")) << top.site.file;
        EXPECT_EQ(top.site.function, truth.leak_function);
        EXPECT_EQ(long(top.site.line), truth.leak_line);
        EXPECT_EQ(truth.leak_stream == "side", top.stream != 0);
        if (!truth.shape.empty()) EXPECT_EQ(name(top.shape), truth.shape);
        if (!truth.kind.empty())
            EXPECT_EQ(top.evidence, truth.kind == "replacement" ? LeakEvidence::replaced_bigger : LeakEvidence::survivors);
    }
}

TEST(Fixtures, WithoutAnnotationsStepsComeFromTheOptimizersFramesAndTheAnswerStands) {
    for (const fs::path& file : vramscope::testing::recorded_snapshots()) {
        SCOPED_TRACE(file.filename().string());
        std::string stem = file.filename().string();
        stem.resize(stem.size() - std::string(".pickle.gz").size());
        const Truth truth = read_truth(file.parent_path() / (stem + ".truth.json"));
        if (!truth.optimizer) continue;
        Trace t = load_any(file.string());
        std::erase_if(t.events, [](const Event& e) {
            return e.kind == EventKind::annotation_start || e.kind == EventKind::annotation_end;
        });
        Findings f = analyze(t);
        EXPECT_EQ(f.steps_source, StepsSource::optimizer_frames);
        EXPECT_GE(f.step_count, 28u);
        EXPECT_EQ(name(f.verdict), truth.verdict);
        if (truth.verdict == "leak") {
            const double measured = measured_rate(truth, f);
            EXPECT_NEAR(f.leak_bytes_per_step, measured, 0.10 * measured);
        }
    }
}

TEST(Fixtures, ConvertedTraceAnalysesTheSame) {
    for (const fs::path& file : vramscope::testing::recorded_snapshots()) {
        SCOPED_TRACE(file.filename().string());
        Trace t = load_any(file.string());
        const std::string out = ::testing::TempDir() + "/" + file.filename().string() + ".vscope";
        write_trace(t, out);
        // The format's size goal: at most 4 bytes an event (gzip'd torch pickles take 6 to 9), beside
        // the tables of strings, frames and stacks (large with stacks="all": C++ names are long).
        Trace tables = t;
        tables.events.clear();
        const std::string tables_out = out + ".tables";
        write_trace(tables, tables_out);
        EXPECT_LE(double(fs::file_size(out) - fs::file_size(tables_out)) / double(t.entry_count()), 4.0);
        fs::remove(tables_out);
        Findings a = analyze(t), b = analyze(read_trace(out));
        EXPECT_EQ(a.verdict, b.verdict);
        EXPECT_EQ(a.step_count, b.step_count);
        EXPECT_EQ(a.leaks.size(), b.leaks.size());
        if (!a.leaks.empty()) EXPECT_DOUBLE_EQ(a.leaks[0].bytes_per_step, b.leaks[0].bytes_per_step);
        fs::remove(out);
    }
}

// Run shapes that fool a naive analysis (tests/data/record_fixtures.py).
TEST(Fixtures, ARingBufferThatWrappedIsJudgedOverTheStepsItCovers) {
    const Findings f = analyze(load_any(std::string(VRAMSCOPE_TEST_DATA) + "/leak_ring_wrap.pickle.gz"));
    EXPECT_GT(f.steps_before_trace, 0u);  // the annotations of the whole run, the entries of its end
    EXPECT_LT(f.step_count, 60u);
    EXPECT_NE(f.notes.front().find("covers the last"), std::string::npos) << f.notes.front();
    const auto before = std::find_if(f.not_leaks.begin(), f.not_leaks.end(),
                                     [](const NotLeak& n) { return n.kind == NotLeakKind::before_trace; });
    ASSERT_NE(before, f.not_leaks.end());
    EXPECT_GT(before->bytes, 50u << 20);  // parameters, optimizer state and the leak's older steps
    ASSERT_TRUE(before->site.has_value());  // with the stacks torch kept in the segments
}

TEST(Fixtures, GeneratedCodeIsNeverTheSiteButStaysInTheStack) {
    const Findings f = analyze(load_any(std::string(VRAMSCOPE_TEST_DATA) + "/leak_compiled_outputs.pickle.gz"));
    ASSERT_FALSE(f.leaks.empty());
    const SiteFinding& top = f.leaks.front();
    EXPECT_TRUE(top.site.file.ends_with("record_fixtures.py")) << top.site.file;
    EXPECT_TRUE(std::any_of(top.stack.begin(), top.stack.end(),
                            [](const SourceLine& s) { return s.file.find("/torchinductor_") != std::string::npos; }));
}

TEST(Fixtures, StacksAllShowPythonFramesFirstAndKeepTheCppOnes) {
    const Findings f = analyze(load_any(std::string(VRAMSCOPE_TEST_DATA) + "/leak_stacks_all.pickle.gz"));
    ASSERT_FALSE(f.leaks.empty());
    const SiteFinding& top = f.leaks.front();
    ASSERT_GT(top.stack_shown_from, 0u);
    EXPECT_NE(top.stack.front().function.find("unwind"), std::string::npos) << top.stack.front().function;
    EXPECT_TRUE(top.stack[top.stack_shown_from].file.ends_with("record_fixtures.py"));
    const std::string text = render_summary(f, false);
    EXPECT_EQ(text.find("unwind"), std::string::npos);
    EXPECT_EQ(text.find("CachingAllocator"), std::string::npos);
    EXPECT_EQ(text.find("_PyEval_EvalFrameDefault"), std::string::npos);
}
