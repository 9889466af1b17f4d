// Two runs side by side (`vramscope diff A B`): their peaks by category and by site, and their
// leaks gone, new or changed. From findings only, however each was made (a trace, a snapshot, a
// findings file): what a fix saved, or what a change cost, between two runs of one job.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "findings/findings.h"

namespace vramscope {

// One device's peak in both runs (0 where a run has none on it).
struct PeakDiff {
    uint16_t device = 0;
    std::string device_name;  // as A names it where A has a peak there, else as B does ("cuda:0", "cpu")
    uint64_t a = 0, b = 0;
    std::array<uint64_t, kPeakCategories> a_categories{}, b_categories{};
    struct Site {
        SourceLine site;
        uint64_t a = 0, b = 0;  // at each run's peak, among its largest sites
    };
    std::vector<Site> sites;  // by the larger of the two, largest first
    struct Module {
        std::string module;     // "" outside any module's forward
        uint64_t a = 0, b = 0;  // at each run's peak, among its largest modules
    };
    std::vector<Module> modules;  // the same order
};

enum class LeakChange : uint8_t { gone, added, changed, same };
std::string_view name(LeakChange c);
// A rate moved when it moved by at least kRateMoves of the larger one.
inline constexpr double kRateMoves = 0.20;

// A leak site in either run: across steps (per step) or inside one (per unit).
struct LeakDiff {
    SourceLine site;
    uint16_t device = 0;
    Memory memory = Memory::torch;
    bool within_step = false;
    std::string unit;  // what its rates are per
    double a = 0, b = 0;
    LeakChange change = LeakChange::same;
};

struct RunDiff {
    std::string a_source, b_source;
    Verdict a_verdict = Verdict::cannot_judge, b_verdict = Verdict::cannot_judge;
    std::vector<PeakDiff> peaks;  // by device
    std::vector<LeakDiff> leaks;  // gone, new, changed, then the same; largest first in each
};

RunDiff diff_runs(const Findings& a, const Findings& b);
std::string render_diff_terminal(const RunDiff& d, bool color);
std::string render_diff_json(const RunDiff& d);
std::string render_diff_html(const RunDiff& d);

}  // namespace vramscope
