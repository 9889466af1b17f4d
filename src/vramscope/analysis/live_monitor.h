// Judges a run while it goes, so a leak is reported before the run ends (or OOMs). It keeps what
// the judge needs for the recent steps only: the live blocks, and per allocation site the bytes
// it held at each of the last kRecentSteps step ends, twice: its blocks at least one step old
// (what a step leaves behind, not the batch in hand, as the offline analysis with its default
// window of 1 counts survivors), and all it holds (a buffer replaced by a bigger one every step).
// Memory follows live blocks and sites, never the length of the run. The rule is
// analysis/judge.h's judge_site, the one the offline analysis applies: on the same step ends both
// reach the same shape. A site confirmed while it climbs and judged bounded later (a cache that
// filled) is withdrawn: the monitor's last word is the final table's. Memory outside torch's
// allocator (a library's own device memory, pinned host memory) has sites of its own, judged alike;
// its blocks are matched by address alone, as the replay matches them (events/validate.h).
// A library that counts its own pool (pool()) has that count judged instead of its driver memory
// on the device, by judge.h's judge_pool, as the offline analysis does (analysis/pools.h).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/address_map.h"
#include "analysis/judge.h"
#include "analysis/settings.h"
#include "analysis/within_step.h"
#include "findings/vocabulary.h"

namespace vramscope {

// A site newly confirmed as leaking (shape rising or slowing), or withdrawn (any other shape).
struct LiveLeak {
    uint8_t device = 0;
    uint32_t site = 0;  // frame id, as the caller gave it
    Memory memory = Memory::torch;
    Shape shape = Shape::rising;
    LeakEvidence evidence = LeakEvidence::survivors;
    double bytes_per_step = 0;
    uint64_t first_step = 0;  // first step of the climb that was judged
    std::optional<uint64_t> projected_oom_step;  // of a leak inside a step (rising_in_step): the unit
    uint16_t pool_library = 0;  // a pool's count (evidence pool_in_use): its library, as the caller numbered it
    // (address, size): survivors' newest first, a step old or more; a replaced buffer's largest first
    std::vector<std::pair<uint64_t, uint64_t>> newest_blocks;
};

class LiveMonitor {
public:
    static constexpr size_t kBlocksKept = 8;  // per confirmed leak: what explain maps to tensors

    // The offline analysis' settings; a warm-up of -1 is kWarmupSteps (a run's length is not known
    // while it goes, and warmup_steps() gives that for every run long enough to judge).
    explicit LiveMonitor(const JudgeSettings& settings = {});

    // library: outside torch's allocator, the caller's number for the library that called the driver (0: none).
    void alloc(uint8_t device, uint64_t addr, uint64_t size, uint32_t site, Memory memory = Memory::torch,
               uint16_t library = 0);
    // A library's own count of its pool on a device, read before the step end that follows
    // (EventKind::pool_usage); library numbered as alloc()'s.
    void pool(uint8_t device, uint16_t library, uint64_t in_use, uint64_t pool_bytes);
    void release(uint8_t device, uint64_t addr, Memory memory = Memory::torch);
    // A device's capacity and the bytes allocated on it before capture began: they count toward
    // its peak, as the offline replay counts the trace's baseline, or a model loaded before the
    // capture would put the projected OOM far too late.
    void set_capacity(uint8_t device, uint64_t capacity, uint64_t allocated_before = 0);
    // Closes a step; returns the sites confirmed as leaking at this step and those withdrawn.
    std::vector<LiveLeak> end_step();
    // The sites whose last word is "leak", with their newest blocks as they are now.
    std::vector<LiveLeak> leaking() const;
    // A unit inside the step ended, named by its marker (within_step.h): one more of the run in
    // hand, or the first of a run of another unit, which sets the run before it aside.
    void end_unit(uint32_t marker);
    // The sites whose bytes rose across the units of the step in hand as a leak does, by the rule
    // the offline analysis judges a step's units with (within_step.h), each with its oldest blocks
    // of this step: asked where the step's last unit has ended and its optimizer step begins, the
    // highest point of a leak inside the step, while what keeps it is live. bytes_per_step is per
    // unit, and the projected out-of-memory is at a unit of the step, from the step's peak so far.
    std::vector<LiveLeak> rising_in_step() const;
    uint64_t steps() const { return step_; }
    // The earliest step at which a device runs out, at the recent rates of the leaks held now and
    // from the peak of the last step with the libraries' own memory (never pinned host memory);
    // none without a leak or a capacity. Unlike a confirmed leak's
    // projection, which is said once, this one follows the run.
    std::optional<uint64_t> projected_oom_step() const;

private:
    struct Block {
        uint64_t addr, size, serial, step;
        uint32_t site;
        uint16_t library;  // outside torch's allocator: who called the driver (0: torch's, or none)
        uint8_t device;
        Memory memory;
    };
    struct Series {
        std::array<double, kRecentSteps> aged{};  // ring: bytes at step ends of blocks a step old or more
        std::array<double, kRecentSteps> held{};  // ring: all bytes at step ends
        size_t count = 0;                         // step ends recorded (ring holds the last kRecentSteps)
        size_t steady = 0;                        // the last step ends that held what the one before did, itself included
        bool reported = false;  // confirmed as a leak, not withdrawn since
        LiveLeak last;          // what was said when it was confirmed
        double recent_rate = 0;  // its recent slope while it leaks: the OOM projection's, as offline
    };
    // A library's pool on a device: its count at the recent step ends, and the library's driver memory then.
    struct Pool {
        uint64_t in_use_now = 0, pool_now = 0;
        std::array<double, kRecentSteps> in_use{}, pool{}, driver{};  // rings, as Series'
        size_t count = 0;
        bool counts = false;    // it speaks for the library's memory on the device (judge.h pool_counts_for)
        bool reported = false;  // confirmed as a leak, not withdrawn since
        LiveLeak last;
        double recent_rate = 0;
    };
    static uint32_t pool_key(uint8_t device, uint16_t library) { return uint32_t(device) << 16 | library; }
    // Judges the pools at a step end; true where a site's memory is a counted pool's.
    void judge_pools(std::vector<LiveLeak>& found);
    bool counted(uint8_t device, Memory memory, uint32_t site) const;
    struct Device {
        int64_t allocated = 0, peak = 0;  // torch's
        int64_t external = 0;             // a library's own device memory
        int64_t last_peak = 0;  // the peak of the last step that ended
        uint64_t capacity = 0;
        double leak_rate = 0;  // recent rates of the leaks held now: what the OOM projection uses
    };
    static uint64_t key(uint8_t device, uint64_t value) { return value ^ uint64_t(device) << 56; }
    // A site's key: torch's and a library's memory at one line are two series.
    static uint64_t site_key(uint8_t device, Memory memory, uint32_t site) { return key(device, site) ^ uint64_t(memory) << 48; }
    SiteJudgement judge_recent(const Series& s) const;
    // Before a site's bytes change: its unit series of the step in hand, as the replay writes them.
    void note_unit(uint64_t site_key, int64_t live);
    // The blocks explain maps to tensors: a leak of survivors', its newest a step old or more; a
    // buffer replaced by a bigger one, its largest (what grows), never the step's other blocks
    // under the same line (a batch in hand, a forward's outputs).
    std::vector<std::pair<uint64_t, uint64_t>> newest_blocks(const LiveLeak& leak) const;

    AddressMap live_{4096};                        // by device and address -> index in blocks_
    AddressMap external_live_{64};                 // outside torch's allocator: by external_key()
    std::vector<Block> blocks_;
    std::vector<uint32_t> free_slots_;             // of blocks_, for reuse: no allocation per event
    std::unordered_map<uint64_t, int64_t> held_;   // by site_key(): live bytes now
    // Of those, allocated in the last `window` steps, by step % window: not yet survivors.
    std::vector<std::unordered_map<uint64_t, int64_t>> young_;
    const uint32_t window_;
    const size_t warmup_, min_steps_;
    std::unordered_map<uint64_t, Series> series_;  // by site_key(), once a step end saw bytes
    std::unordered_map<uint32_t, Pool> pools_;     // by pool_key(), once read
    std::unordered_map<uint32_t, int64_t> library_bytes_;  // by pool_key(): a library's driver memory on a device now
    std::unordered_map<uint32_t, uint32_t> latest_site_;   // by pool_key(): the site of its latest driver allocation
    std::unordered_map<uint64_t, uint16_t> site_library_;  // by site_key(): the library of its latest allocation
    std::array<Device, 256> devices_{};
    std::unordered_map<uint64_t, UnitSeries> units_;  // torch's sites, by site_key(): the run in hand's unit ends
    std::vector<uint64_t> touched_in_step_;           // sites with a unit series of the run in hand
    uint32_t unit_ = 0;                               // units ended in the run in hand
    uint32_t unit_run_ = 0;                           // runs begun, as the replay counts them
    uint32_t unit_marker_ = 0;                        // the name of the run's unit marker
    uint64_t step_ = 0;
    uint64_t serial_ = 0;
};

}  // namespace vramscope
