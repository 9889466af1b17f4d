// What the report, the exports and the rank comparison make of findings and traces.
#include <gtest/gtest.h>

#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "importers/torch_snapshot.h"
#include "render/export.h"
#include "render/html.h"
#include "trace_builder.h"

using namespace vramscope;
using vramscope::testing::TraceBuilder;

namespace {

Findings run_of_rank(int rank, double leak_per_step, uint64_t peak) {
    Findings f;
    f.meta.emplace_back("rank", std::to_string(rank));
    f.leak_bytes_per_step = leak_per_step;
    DeviceSummary d;
    d.timeline.push_back(StepPoint{peak / 2, peak, peak, 0, {}});
    f.devices.push_back(d);
    return f;
}

}  // namespace

TEST(Ranks, OnlySomeRanksLeakingIsSkew) {
    const RankComparison c = compare_ranks({run_of_rank(1, 1 << 20, 1ull << 30), run_of_rank(0, 0, 1ull << 30)});
    ASSERT_EQ(c.rows.size(), 2u);
    EXPECT_EQ(c.rows[0].rank, 0);
    ASSERT_EQ(c.skew.size(), 1u);
    EXPECT_EQ(c.skew[0], "only some ranks leak: rank 1 leaks, rank 0 does not");
}

TEST(Ranks, APeakTenPercentApartIsSkewAndRunsWithoutRanksAreNotCompared) {
    const RankComparison c = compare_ranks({run_of_rank(0, 0, 10ull << 30), run_of_rank(1, 0, 12ull << 30)});
    ASSERT_EQ(c.skew.size(), 1u);
    EXPECT_NE(c.skew[0].find("peak memory differs: rank 1"), std::string::npos);
    EXPECT_TRUE(compare_ranks({Findings{}, Findings{}}).rows.empty());
}

TEST(Export, MemoryVizPickleReadsBackEventForEvent) {
    TraceBuilder b;
    for (int step = 0; step < 12; ++step) {
        b.alloc(0x7f0000000000ull + uint64_t(step) * 4096, 4096, b.stack({{"train.py", 10, "leaky"}}));
        b.alloc(0x7f1000000000ull, 1 << 20, b.stack({{"train.py", 20, "transient"}}));
        b.free(0x7f1000000000ull, 1 << 20);
        b.step();
    }
    const std::string pickled = to_memory_viz_pickle(b.t);
    const Trace back = import_torch_snapshot(pickled, "export.pickle");
    EXPECT_EQ(back.entry_count(), b.t.entry_count() - 12) << "markers are not snapshot entries";
    size_t allocs = 0;
    for (const Event& e : back.events) {
        if (e.kind != EventKind::alloc) continue;
        ++allocs;
        ASSERT_NE(e.stack, 0u);
        const Frame& f = back.stacks.frame(back.stacks.node(e.stack).frame);
        EXPECT_EQ(back.stacks.string(f.file), "train.py");
    }
    EXPECT_EQ(allocs, 24u);
}

TEST(Export, PerfettoTimesAreWholeMicroseconds) {
    TraceBuilder b;
    for (int step = 0; step < 3; ++step) {
        b.alloc(0x7f0000000000ull, 4096, 0);
        b.free(0x7f0000000000ull, 4096);
        b.step();
    }
    for (Event& e : b.t.events) e.time_us += 1795370000123456;  // an epoch time: a double would round it
    const std::string json = to_perfetto_json(b.t, analyze(b.t));
    const std::string first_step = "\"name\":\"step 0\",\"pid\":1,\"tid\":1,\"ts\":" +
                                   std::to_string(b.t.events.front().time_us) + ",";
    EXPECT_NE(json.find(first_step), std::string::npos) << json.substr(0, 400);
    EXPECT_NE(json.find("\"name\":\"step 2\""), std::string::npos);
}

TEST(Report, NoStringCanChangeThePage) {
    const std::string page = report_page(
        "{\"runs\":[{\"source\":\"</script><script>alert(1)</script><!--<script>a&b>\xE2\x80\xA8\xE2\x80\xA9\"}]}");
    const size_t data = page.find("<script id=\"data\"");
    const size_t data_end = page.find("</script>", data);
    const std::string embedded = page.substr(data, data_end - data);
    // Inside the data element: not one <, > (past its own tag) or & of the strings, and no raw U+2028/9.
    const std::string body = embedded.substr(embedded.find('>') + 1);
    EXPECT_EQ(body.find_first_of("<>&"), std::string::npos) << body;
    EXPECT_EQ(body.find("\xE2\x80\xA8"), std::string::npos);
    EXPECT_NE(body.find("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\\u003c!--\\u003cscript\\u003ea\\u0026b\\u003e\\u2028\\u2029"),
              std::string::npos) << body;
    EXPECT_EQ(page.find("/*VRAMSCOPE_DATA*/"), std::string::npos);
}
