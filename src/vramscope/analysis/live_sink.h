// The live monitor as a capture's sink: the recorder hands it stacks and events on its drain, and
// it judges them (analysis/live_monitor.h) with the sites the offline analysis gives the same
// stacks (analysis/sites.h), memory outside torch's allocator included. What it said at the last step end, and its last word, are read from
// the training thread, hence its own lock.
#pragma once
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/live_monitor.h"
#include "events/sink.h"
#include "findings/findings.h"

namespace vramscope {

class LiveSink : public EventSink {
public:
    explicit LiveSink(const JudgeSettings& settings = {}) : monitor_(settings) {}
    void device(uint8_t device, uint64_t capacity, uint64_t allocated_before) override;
    void stack(uint32_t stack, std::span<const SinkFrame> frames) override;
    void name(uint32_t id, std::string_view text) override;
    void events(std::span<const Event> events) override;

    // What the monitor confirmed or withdrew at the step ends since the last call.
    std::vector<LiveFinding> take_said();
    // The sites it holds as leaking now, with their newest blocks.
    std::vector<LiveFinding> leaking() const;
    // The sites rising across the step's units now (LiveMonitor::rising_in_step), per unit.
    std::vector<LiveFinding> rising_in_step() const;
    std::optional<uint64_t> projected_oom_step() const;

private:
    std::vector<LiveFinding> described(std::vector<LiveLeak> leaks) const;
    uint16_t library_number(const std::string& library);  // the monitor's number for a library, from 1

    mutable std::mutex mutex_;
    LiveMonitor monitor_;
    // Sites as the offline analysis splits them (analysis/sites.h SiteKey), numbered from 1 in the
    // order met: site frame << 32 | the library function's number (0: not split).
    std::unordered_map<uint64_t, uint32_t> site_ids_;
    std::unordered_map<std::string, uint32_t> library_functions_;  // file '\0' function -> number
    std::vector<uint32_t> site_of_stack_;                  // by stack id: its site's number
    struct SiteLines {
        SourceLine site;
        std::optional<SourceLine> allocated_in;
    };
    std::unordered_map<uint32_t, SiteLines> site_lines_;   // site number -> where
    // Outside torch's allocator: the library that called the driver (its stack's innermost frame),
    // by stack id, and by site as its latest allocation named it (device << 56 | memory << 48 | frame).
    std::unordered_map<uint32_t, std::string> library_of_stack_;
    std::unordered_map<uint64_t, std::string> library_of_site_;
    std::unordered_map<uint32_t, int8_t> rank_of_frame_;   // a FrameRank, by frame id
    std::unordered_map<uint32_t, std::string> names_;      // a pool reading's library, by its name id
    std::unordered_map<std::string, uint16_t> library_numbers_;
    std::vector<std::string> libraries_{""};               // by the monitor's number
    std::vector<LiveFinding> said_;
    bool seen_memory_ = false;  // step ends before the first memory event are not judged (is_memory_event)
};

}  // namespace vramscope
