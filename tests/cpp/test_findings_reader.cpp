// The one findings reader (findings/json_reader.h): every findings file read back is the findings it
// was written from, and owners meet leaks in one join.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "error_of.h"
#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "findings/json.h"
#include "findings/json_reader.h"
#include "recorded_fixtures.h"

using namespace vramscope;
using vramscope::testing::error_of;
namespace fs = std::filesystem;

namespace {
const fs::path kData = VRAMSCOPE_TEST_DATA;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

Findings analysed(const std::string& name) { return analyze_file((kData / name).string()); }

// A TRACE.owners.json answer for one leak, as python/vramscope/owners/leaks.py explained() writes it.
std::string owners_file(const SiteFinding& l) {
    return R"([{"site": {"file": ")" + l.site.file + R"(", "line": )" + std::to_string(l.site.line) + R"(, "function": ")" +
           l.site.function + R"("}, "device": 0, "bytes_per_step": 2097150.0, "owners": [{"path": "main() local 'cache'[3]",
  "root": "main() local 'cache'", "edges": ["[3]"], "target": "Tensor 2.0 MiB f32 [524288] cuda:0", "kind": "reachable"}],
  "owner_lines": ["ignored"], "note": "", "found_at_step": 12}])";
}
}  // namespace

TEST(FindingsReader, EveryGoldenFileReadsBackToItsOwnText) {
    size_t files = 0;
    for (const auto& entry : fs::directory_iterator(kData / "findings")) {
        const std::string text = read_text(entry.path());
        const FindingsFile file = read_findings(text, entry.path().string());
        const std::string again = to_json(file.runs, file.ranks);
        size_t i = 0;
        while (i < again.size() && i < text.size() && again[i] == text[i]) ++i;
        EXPECT_TRUE(again == text) << entry.path() << " differs at byte " << i << ": " << again.substr(i, 80);
        ++files;
    }
    EXPECT_GE(files, 30u);
}

TEST(FindingsReader, SeveralRunsAndTheirRanksRoundTripExactly) {
    std::vector<Findings> runs;
    for (const fs::path& p : vramscope::testing::recorded_snapshots()) runs.push_back(analyze_file(p.string()));
    ASSERT_GE(runs.size(), 2u);
    for (size_t r = 0; r < runs.size(); ++r) runs[r].meta.emplace_back("rank", std::to_string(r));
    const RankComparison ranks = compare_ranks(runs);
    const std::string json = to_json(runs, ranks);
    const FindingsFile back = read_findings(json, "runs.json");
    EXPECT_EQ(back.runs.size(), runs.size());
    EXPECT_EQ(to_json(back.runs, back.ranks), json);
}

TEST(FindingsReader, OwnersAreJoinedByDeviceAndSiteAndWrittenOnlyWhereFound) {
    Findings f = analysed("leak_ctx_losses.pickle.gz");
    ASSERT_EQ(f.leaks.size(), 2u);
    const std::string without = to_json(f);
    EXPECT_EQ(without.find("\"owners\""), std::string::npos);
    const std::string owners = owners_file(f.leaks[0]);
    Findings on_another_device = f;
    for (SiteFinding& l : on_another_device.leaks) l.device = 1;
    attach_owners(on_another_device, owners, "t.owners.json");
    EXPECT_TRUE(on_another_device.leaks[0].owners.empty()) << "same site, other device: not the same leak";

    attach_owners(f, owners, "t.owners.json");
    const SiteFinding& held = f.leaks[0];
    ASSERT_EQ(held.owners.size(), 1u);
    EXPECT_EQ(held.owners[0].edges, std::vector<std::string>{"[3]"});
    EXPECT_EQ(held.owners_found_at_step, 12u);
    EXPECT_TRUE(f.leaks[1].owners.empty());
    EXPECT_EQ(owner_line(held.owners[0]), "main() local 'cache'[3]  → Tensor 2.0 MiB f32 [524288] cuda:0");

    const std::string json = to_json(f);
    EXPECT_NE(json.find(R"("owners":[{"path":"main() local 'cache'[3]","root":"main() local 'cache'","edges":["[3]"],)"
                        R"("target":"Tensor 2.0 MiB f32 [524288] cuda:0","kind":"reachable"}],"owners_found_at_step":12})"),
              std::string::npos);
    EXPECT_EQ(to_json(read_findings(json, "f.json").runs), json) << "owners read back as written";
    const std::string report = to_report_json({f}, {});
    EXPECT_NE(report.find("\"line\":\"main() local 'cache'[3]  → Tensor"), std::string::npos);
}

TEST(FindingsReader, WrongFieldsAreRefusedNamingFileAndField) {
    EXPECT_NE(error_of([] { read_findings(R"({"verdict":"maybe"})", "a.json"); }).find("a.json: verdict: \"maybe\" is not one of"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_findings(R"({"verdict":"leak","leak_bytes_per_step":1e999})", "a.json"); })
                  .find("a.json: leak_bytes_per_step: 1e999 is not a number"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_findings(R"({"verdict":"leak","events":-1})", "a.json"); }).find("events: -1 is not a whole number"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_findings(R"({"verdict":"leak","leaks":"x"})", "a.json"); }).find("leaks: \"x\" is not an array"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_findings(R"({"verdict":"leak","devices":[],"timeline":[{"device":3,"step":0}]})", "a.json"); })
                  .find("timeline"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_findings("[]", "a.json"); }).find("its root is an array"), std::string::npos);
    EXPECT_NE(error_of([] {
                  Findings f;
                  attach_owners(f, "{}", "t.owners.json");
              }).find("t.owners.json: not an owners file"),
              std::string::npos);
    // Left out: the default, so a findings file of an older version still reads.
    const FindingsFile minimal = read_findings(R"({"verdict":"no-leak"})", "a.json");
    EXPECT_EQ(minimal.runs.at(0).verdict, Verdict::no_leak);
}
