#include "analysis/analyze.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "analysis/fit.h"
#include "analysis/judge.h"
#include "analysis/ledger.h"
#include "analysis/libraries.h"
#include "analysis/pools.h"
#include "analysis/replay.h"
#include "analysis/sites.h"
#include "analysis/step_cuts.h"
#include "analysis/steps.h"
#include "analysis/usage.h"
#include "common/chunk_source.h"
#include "common/format.h"
#include "common/read_ahead.h"
#include "importers/torch_snapshot.h"
#include "events/validate.h"
#include "trace/format.h"
#include "trace/reader.h"

namespace vramscope {
namespace {

// Events the reader hands the replay at a time: 32 KiB, read back from the first-level cache
// instead of from the 10 MB of events a 1 MiB chunk decodes to (a tenth off the time of
// docs/benchmarks.md's analysis-10m-events).
constexpr size_t kEventsInCache = 1024;

// A site the judge reads: one that left survivors, or whose holdings rose.
struct JudgedSite {
    SiteSeries* s;
    std::map<uint64_t, uint64_t> stream_bytes;  // of its blocks never freed
    std::vector<std::pair<uint64_t, uint64_t>> live_blocks;   // a window old or more
    std::vector<std::pair<uint64_t, uint64_t>> young_blocks;  // younger: a replaced buffer's newest
};

// A series' step ends 0..S-1 one by one, for the report's drawing of a leak: its stretches over
// them (a bucket drawn at its mean).
std::vector<uint64_t> values_at_step_ends(std::span<const Stretch> series, size_t S) {
    std::vector<uint64_t> out(S, 0);
    for (const Stretch& p : series) std::fill(out.begin() + p.from, out.begin() + p.to + 1, uint64_t(p.mean));
    return out;
}

std::string mib(double bytes) { return format_bytes(bytes); }

// A site in a note: "train.py:42 forward", or its file alone when it has no line.
std::string site_words(const SourceLine& s) {
    return s.line ? base_name(s.file) + ":" + std::to_string(s.line) + " " + s.function : s.file;
}

// Live blocks grouped by site: the total, the largest site, and the top five as text.
struct Holders {
    uint64_t bytes = 0;
    uint32_t top_site = 0;
    std::string text;
};

Holders largest_holders(const std::vector<LiveBlock>& blocks, SiteResolver& resolver, const StackTable& table) {
    Holders h;
    std::unordered_map<uint32_t, uint64_t> by_site;
    for (const LiveBlock& b : blocks) {
        by_site[resolver.site(b.stack)] += b.size;
        h.bytes += b.size;
    }
    std::vector<std::pair<uint64_t, uint32_t>> top;
    for (const auto& [site, bytes] : by_site) top.emplace_back(bytes, site);
    std::sort(top.rbegin(), top.rend());
    if (!top.empty()) h.top_site = top.front().second;
    for (size_t i = 0; i < top.size() && i < 5; ++i) {
        const SourceLine s = source_line(table, top[i].second);
        h.text += (i ? ", " : " ") + mib(double(top[i].first)) + " at " + site_words(s);
    }
    return h;
}

Findings cannot_judge(const Trace& t, uint64_t entries, bool allocated_any) {
    Findings f;
    f.allocated_any = allocated_any;
    f.source = t.source;
    f.format = t.format;
    f.warnings = t.warnings;
    for (const auto& kv : t.meta) f.meta.push_back(kv);
    // Input that cannot be trusted gets no verdict and no analysis (events/validate.h says
    // why): numbers from it would only mislead.
    f.verdict = Verdict::cannot_judge;
    f.input_faults = t.faults;
    f.event_count = entries;
    return f;
}

// The steps conclude judges: the first after warm-up, and whether enough follow.
struct Span {
    size_t S = 0;            // full steps
    size_t s0 = 0;           // first judged step
    size_t w = 1;            // survival window
    size_t min_steps = kMinSteps;  // step ends after warm-up needed to call a shape
    bool judgeable = false;  // min_steps step ends after warm-up, and the window elapsed inside the trace
    size_t last_judged = 0;  // last step whose survivors can be judged
    size_t judged() const { return judgeable ? last_judged - s0 + 1 : 0; }
};

// Whether a site held more at some judged step end than at the one before.
bool rises_after(const SiteSeries& s, size_t s0, size_t S) { return merged(s.held.stretches(uint32_t(s0), uint32_t(S - 1))).rises > 0; }

void note_steps(Findings& f, const Replay& r, const Steps& steps, const Span& span) {
    const Trace& t = r.context;
    if (!r.has_memory_events) {
        if (!t.final_blocks.empty())
            f.notes.push_back("This snapshot has no trace history, only the memory state at the moment it was taken, so "
                              "growth over steps cannot be measured. Record one with "
                              "torch.cuda.memory._record_memory_history(max_entries=1000000) before the training loop "
                              "and torch.cuda.memory._dump_snapshot(\"snap.pickle\") after a few steps, or capture live "
                              "with `vramscope run`.");
        else
            f.notes.push_back("The input holds no memory events.");
    } else if (!span.judgeable) {
        f.notes.push_back("Only " + std::to_string(span.S) + " full steps found (from " + std::string(describe(steps.source)) +
                          "); at least " + std::to_string(span.s0 + std::max<size_t>(span.min_steps, span.w + 3)) +
                          " are needed to tell a leak from warm-up or a cache. Record more steps.");
    }
    if (f.steps_before_trace > 0)
        f.notes.push_back("The trace covers the last " + std::to_string(span.S) + " full steps of a run of at least " +
                          std::to_string(span.S + f.steps_before_trace) + " (" + std::to_string(f.steps_before_trace) +
                          " steps ended before its first memory event: torch's ring buffer of max_entries wrapped, "
                          "or recording began late); rates and steps are judged over the steps it covers, counted "
                          "from its start.");
}

// What judging the sites gives the device-level explanations and the projection.
struct SiteTotals {
    std::map<uint16_t, double> leak_rate;                               // recent rates of the leaks, by device
    std::map<uint16_t, std::map<uint64_t, uint64_t>> leaked_by_stream;  // live bytes of leak sites
    std::vector<LedgerBuilder> ledgers;                                 // by index in r.devices
    std::vector<bool> leaking;                                          // by site: a confirmed leak
};

// The sites judged: those that left survivors, in the order their first survivor was allocated,
// then those whose holdings rose without any; the rest held still once warm-up was over, and their
// growth is warm-up. With each, where its blocks never freed were allocated, and the ones the owner search
// maps to tensors: those the judge counted (a window old: the last steps' are still in loop
// locals), else the newest.
std::vector<JudgedSite> sites_to_judge(Replay& r, const Span& span, const std::vector<LiveAlloc>& live, SiteTotals& totals,
                                       const std::vector<size_t>& ledger_of) {
    const Trace& t = r.context;
    const size_t S = span.S;
    std::vector<SiteSeries*> judged;
    for (SiteSeries& s : r.sites)
        if (s.surviving_allocations) judged.push_back(&s);
    std::sort(judged.begin(), judged.end(),
              [](const SiteSeries* a, const SiteSeries* b) { return a->first_survivor < b->first_survivor; });
    for (SiteSeries& s : r.sites)
        if (!s.surviving_allocations && rises_after(s, span.s0, S)) judged.push_back(&s);
        else if (!s.surviving_allocations && s.memory == Memory::torch)  // the ledger is torch's allocated bytes
            totals.ledgers[ledger_of[s.device]].add(LedgerPart::warm_up, int64_t(s.at_end(S - 1) - s.at_end(0)),
                                                    source_line(t.stacks, s.site_frame));
    std::vector<JudgedSite> series;
    std::vector<size_t> series_of(r.sites.size(), SIZE_MAX);
    for (SiteSeries* s : judged) {
        series_of[size_t(s - r.sites.data())] = series.size();
        series.push_back(JudgedSite{s, {}, {}, {}});
    }
    for (const LiveAlloc& a : live) {
        if (a.step >= S || series_of[a.site] == SIZE_MAX) continue;
        JudgedSite& js = series[series_of[a.site]];
        js.stream_bytes[t.streams[a.stream]] += a.size;
        if (js.live_blocks.size() < 4096 && a.step + span.w < S) js.live_blocks.emplace_back(a.addr, a.size);
        else if (a.step + span.w >= S) js.young_blocks.emplace_back(a.addr, a.size);
    }
    return series;
}

void show_stack(const Trace& t, SiteFinding& sf, uint32_t stack) {
    sf.stack = stack_lines(t.stacks, stack);
    sf.stack_shown_from = machinery_frames(sf.stack);
    sf.allocated_in = library_frame(sf.stack, sf.stack_shown_from, sf.site);
}

// What the findings say of a judged site whatever its verdict: where, its stack and stream, what
// it holds (`held`: all its step ends as one stretch).
SiteFinding describe_site(const Trace& t, JudgedSite& js, const Stretch& held) {
    const SiteSeries& s = *js.s;
    SiteFinding sf;
    sf.device = s.device;
    sf.site = source_line(t.stacks, s.site_frame);
    sf.memory = s.memory;
    // The stack of most of its survivors' bytes (a buffer replaced by a bigger one has its own,
    // show_stack_of_growth()), else of its latest allocation.
    uint32_t best_stack = 0;
    uint64_t best_bytes = 0;
    for (const auto& [stack, bytes] : s.bytes_by_stack)
        if (bytes > best_bytes) best_bytes = bytes, best_stack = stack;
    show_stack(t, sf, best_stack ? best_stack : s.last_stack);
    // Outside torch's allocator, the innermost frame is the library that called the driver.
    if (s.memory != Memory::torch) sf.library = library_name(sf.stack.empty() ? kUnknownLibrary : std::string_view(sf.stack[0].file));
    uint64_t stream_best = 0;
    for (const auto& [stream, bytes] : js.stream_bytes)
        if (bytes > stream_best) stream_best = bytes, sf.stream = stream;
    sf.surviving_allocations = s.surviving_allocations;
    sf.live_bytes = uint64_t(held.last);
    sf.peak_bytes = uint64_t(held.high);
    sf.live_blocks = js.live_blocks.empty() ? std::move(js.young_blocks) : std::move(js.live_blocks);
    return sf;
}

// Whose memory a note speaks of, before the rest of its words: nothing for torch's allocator's.
std::string memory_words(const SiteFinding& sf) {
    if (sf.memory == Memory::torch) return "";
    return (sf.memory == Memory::pinned ? "pinned host memory of " : "device memory of ") + sf.library +
           " outside torch's allocator: ";
}

NotLeak bounded_cache(const SiteFinding& sf, const Judgement& aged, const Span& span, size_t recurring) {
    NotLeak n;
    n.kind = NotLeakKind::bounded_cache;
    n.bytes = sf.peak_bytes;
    n.site = sf.site;
    n.device = sf.device;
    n.why = memory_words(sf) + "allocations here outlive their step in " + std::to_string(recurring) + " of " +
            std::to_string(span.judged()) + " steps; what it holds rose to a high at step " +
            std::to_string(span.s0 + aged.last_high) + ", then made no new high in the last " +
            std::to_string(span.S - 1 - span.s0 - aged.last_high) + " steps (at most " + mib(double(sf.peak_bytes)) +
            ", now " + mib(double(sf.live_bytes)) + "): a cache with a bound, not a leak";
    return n;
}

// Sites of one memory that took it in the warm-up steps and kept it.
struct WarmUp {
    struct Site {
        uint64_t bytes;
        SourceLine site;
        std::string library;
        uint16_t device;
    };
    uint64_t bytes = 0;
    std::vector<Site> sites;
};

// One explanation per memory, largest sites first: torch's, a library's own (a cuBLAS workspace,
// a communicator's buffers), pinned host memory.
NotLeak warm_up(WarmUp& w, Memory memory, size_t s0) {
    auto& sites = w.sites;
    std::sort(sites.begin(), sites.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
    NotLeak n;
    n.kind = NotLeakKind::warm_up;
    n.bytes = w.bytes;
    n.site = sites.front().site;
    n.device = sites.front().device;
    const std::string what = memory == Memory::torch      ? " allocated"
                             : memory == Memory::external ? " of device memory outside torch's allocator taken"
                                                          : " of pinned host memory taken";
    const std::string kept = memory == Memory::torch ? "parameters, optimizer state, workspaces"
                                                     : "library workspaces, communicators' buffers, staging buffers";
    n.why = mib(double(w.bytes)) + what + " in the first " + (s0 == 1 ? std::string("step") : count_of(s0, "step")) +
            " and kept since (" + kept + "), from " + count_of(sites.size(), "site") + "; it does not grow afterwards. Largest:";
    for (size_t k = 0; k < sites.size() && k < 3; ++k) {
        const SourceLine& at = sites[k].site;
        n.why += (k ? ", " : " ") + mib(double(sites[k].bytes)) + (sites[k].library.empty() ? "" : " by " + sites[k].library) +
                 " at " + (at.line ? base_name(at.file) + ":" + std::to_string(at.line) : at.file);
    }
    return n;
}

// A library that counted its pool (analysis/pools.h): a leak where what is in use grows, its rate the
// count's, at the site of the library's latest driver allocation on the device (where its pool last
// grew); a pool that grew while what is in use did not, a cache that filled.
void pool_findings(Replay& r, Findings& f, const Span& span, const std::vector<LiveAlloc>& live, std::vector<CountedPool>& pools,
                   std::map<std::pair<uint16_t, Memory>, LineFit>& device_fit, SiteTotals& totals) {
    const Trace& t = r.context;
    const size_t S = span.S, s0 = span.s0, judged = span.judged();
    for (CountedPool& c : pools) {
        const PoolSeries& p = *c.series;
        if (!c.judged.counts) continue;
        const Judgement& j = c.judged.in_use;
        const uint32_t site_index = c.holder ? c.holder->last_site : UINT32_MAX;
        const SiteSeries* site = site_index < r.sites.size() ? &r.sites[site_index] : nullptr;
        SiteFinding sf;
        sf.device = p.device;
        sf.memory = Memory::external;
        sf.library = p.library;
        if (site) {
            sf.site = source_line(t.stacks, site->site_frame);
            show_stack(t, sf, site->last_stack);
        } else {  // the pool was taken before the capture began: no driver call of it was seen
            sf.site = SourceLine{p.library + "'s pool", 0, ""};
        }
        const double in_use_now = p.in_use.at_end(S - 1), pool_now = p.pool.at_end(S - 1);
        const double cached = std::max(0.0, pool_now - in_use_now);
        const std::string count_words = p.library + "'s pool (its own count of the bytes in use)";
        if (c.judged.leaks() && j.rises >= 2) {
            sf.evidence = LeakEvidence::pool_in_use;
            sf.shape = j.shape;
            sf.bytes_per_step = j.bytes_per_step;
            sf.recent_bytes_per_step = j.recent_bytes_per_step;
            sf.fit_r2 = j.r2;
            sf.first_step = s0 + j.first_rise;
            const std::vector<Stretch> in_use = p.in_use.held.stretches(0, uint32_t(S - 1));
            sf.held = values_at_step_ends(in_use, S);
            sf.live_bytes = uint64_t(in_use_now);
            sf.peak_bytes = uint64_t(merged(in_use).high);
            sf.recurrence = judged ? std::min(1.0, double(j.rises) / double(judged)) : 0;
            sf.confidence = leak_confidence(j.r2, j.rises, judged);
            const LineFit& dfit = device_fit[{p.device, Memory::external}];
            sf.share_of_growth = dfit.slope > 0 ? std::min(1.0, j.bytes_per_step / dfit.slope) : 1;
            // The pool's blocks, oldest first: the arrays that lie lowest in the oldest of them were
            // kept the longest, and what keeps them is the leak's owner (the newest are still the loop's).
            std::unordered_map<uint32_t, bool> of_library;
            for (const LiveAlloc& a : live) {
                const SiteSeries& s = r.sites[a.site];
                if (s.memory != Memory::external || s.device != p.device || a.step >= S) continue;
                auto [it, added] = of_library.try_emplace(a.site, false);
                if (added) it->second = site_library(t, s) == p.library;
                if (it->second && sf.live_blocks.size() < 4096) sf.live_blocks.emplace_back(a.addr, a.size);
                if (it->second) ++sf.surviving_allocations;
            }
            if (confirmed(sf.confidence)) totals.leak_rate[p.device] += j.recent_bytes_per_step;
            if (site_index < totals.leaking.size()) totals.leaking[site_index] = confirmed(sf.confidence);
            f.leaks.push_back(std::move(sf));
        } else if (c.driver_rose) {
            NotLeak n;
            n.kind = NotLeakKind::bounded_cache;
            n.bytes = uint64_t(cached);
            n.site = sf.site;
            n.device = p.device;
            n.why = "device memory of " + p.library + " outside torch's allocator: its pool grew to " + mib(pool_now) +
                    " over steps " + std::to_string(s0) + ".." + std::to_string(S - 1) + " while " + count_words + " went from " +
                    mib(p.in_use.at_end(std::min(s0, S - 1))) + " to " + mib(in_use_now) + " (" + std::string(name(j.shape)) +
                    "): " + mib(cached) + " it keeps for reuse, a cache that filled, not a leak";
            f.not_leaks.push_back(std::move(n));
        }
    }
}

// Every site: judged on its survivors and on what it holds (analysis/judge.h); a leak becomes a
// finding, a bounded cache or warm-up an explanation, and its growth goes to one ledger part.
SiteTotals judge_sites(Replay& r, Findings& f, const Span& span, const std::vector<LiveAlloc>& live) {
    const Trace& t = r.context;
    const size_t S = span.S, s0 = span.s0, judged = span.judged();
    SiteTotals totals;
    totals.leaking.assign(r.sites.size(), false);
    if (!span.judgeable) return totals;
    for (SiteSeries& s : r.sites) s.record_held(uint32_t(S)), s.aged.record_held(uint32_t(S));
    std::vector<size_t> ledger_of(256, 0);
    // For each leak's share of the growth: of torch's allocated bytes, or of its own memory's.
    std::map<std::pair<uint16_t, Memory>, LineFit> device_fit;
    for (size_t i = 0; i < r.devices.size(); ++i) {
        const DeviceSummary& d = r.devices[i];
        ledger_of[d.device] = i;
        totals.ledgers.emplace_back(d.device, 0, S - 1, d.timeline[0].allocated, d.timeline[S - 1].allocated);
        for (const Memory memory : {Memory::torch, Memory::external, Memory::pinned}) {
            std::vector<double> bytes;
            for (size_t k = 0; k < S; ++k) {
                const StepPoint& p = d.timeline[k];
                bytes.push_back(double(memory == Memory::torch ? p.allocated : memory == Memory::external ? p.external : p.pinned));
            }
            device_fit[{d.device, memory}] = fit_line(bytes, s0, S - 1);
        }
    }
    std::vector<JudgedSite> series = sites_to_judge(r, span, live, totals, ledger_of);
    std::array<WarmUp, 3> warmups;  // by Memory
    // A library that counted its pool: its device memory is judged by that count (pool_findings()).
    std::vector<CountedPool> pools = count_pools(r, s0, S, span.min_steps);
    for (JudgedSite& js : series) {
        const SiteSeries& s = *js.s;
        CountedPool* pool = pool_of(pools, t, s);
        const std::vector<Stretch> held = s.held.stretches(0, uint32_t(S - 1));  // what it held at each full step's end
        const Stretch whole = merged(held);
        SiteFinding sf = describe_site(t, js, whole);
        // Steps whose allocations here outlived the window: the judged ones recur.
        size_t recurring = s.survivor_steps_from(s0);
        if (s.survivor_steps) sf.first_step = s.first_survivor_step;
        const SiteJudgement site =
            judge_site(s.aged.held.stretches(uint32_t(s0), uint32_t(S - 1)), cut(held, uint32_t(s0), uint32_t(S - 1)), span.min_steps);
        const Judgement& j = site.leak();
        sf.evidence = site.evidence();
        if (sf.evidence == LeakEvidence::replaced_bigger) {
            // The buffer that grows is the site's largest allocation, its latest: never a batch in
            // hand or a forward's temporary under the same line, which may survive a step or be
            // allocated last.
            if (s.largest) show_stack(t, sf, s.largest_stack);
            // Nothing survives: what recurs is the rise, from its first step on.
            recurring = j.rises;
            sf.first_step = whole.first_rise != Stretch::kNone ? whole.first_rise : s0;
        }
        sf.recurrence = judged ? std::min(1.0, double(recurring) / double(judged)) : 0;
        sf.shape = j.shape;
        sf.bytes_per_step = j.bytes_per_step;
        sf.recent_bytes_per_step = j.recent_bytes_per_step;
        sf.fit_r2 = j.r2;
        bool is_confirmed = false;
        const SourceLine site_line = sf.site;
        if (pool && (pool->judged.leaks() || (site.leaks() && recurring >= 2))) {
            // The pool's count says what its growth is, a leak or a cache that filled: said once, for the pool.
            pool->driver_rose |= site.leaks() && recurring >= 2;
        } else if (site.leaks() && recurring >= 2) {
            sf.confidence = leak_confidence(j.r2, recurring, judged);
            is_confirmed = confirmed(sf.confidence);
            totals.leaking[size_t(js.s - r.sites.data())] = is_confirmed;
            const LineFit& dfit = device_fit[{s.device, s.memory}];
            sf.share_of_growth = dfit.slope > 0 ? std::min(1.0, j.bytes_per_step / dfit.slope) : 0;
            // Pinned memory is the host's: it brings no device nearer its OOM.
            if (s.memory != Memory::pinned) totals.leak_rate[s.device] += j.recent_bytes_per_step;
            if (s.memory == Memory::torch)  // streams are torch's allocator's
                for (const auto& [stream, bytes] : js.stream_bytes) totals.leaked_by_stream[s.device][stream] += bytes;
            sf.held = values_at_step_ends(held, S);
            f.leaks.push_back(std::move(sf));
        } else if (s.surviving_allocations && (recurring == 0 || site.aged.shape == Shape::warm_up) &&
                   ledger_part(site, S - s0, false) == LedgerPart::warm_up) {
            WarmUp& w = warmups[size_t(s.memory)];
            w.bytes += sf.live_bytes;
            w.sites.push_back(WarmUp::Site{sf.live_bytes, sf.site, sf.library, sf.device});
        } else if (site.aged.shape == Shape::bounded && sf.peak_bytes > 0) {
            f.not_leaks.push_back(bounded_cache(sf, site.aged, span, recurring));
        }
        if (s.memory == Memory::torch)  // the ledger is torch's allocated bytes; the usage ledger has the rest
            totals.ledgers[ledger_of[s.device]].add(ledger_part(site, S - s0, is_confirmed), int64_t(whole.last - whole.first),
                                                    site_line);
    }
    pool_findings(r, f, span, live, pools, device_fit, totals);
    std::sort(f.leaks.begin(), f.leaks.end(),
              [](const SiteFinding& a, const SiteFinding& b) { return a.bytes_per_step > b.bytes_per_step; });
    for (const Memory memory : {Memory::torch, Memory::external, Memory::pinned})
        if (warmups[size_t(memory)].bytes > 0) f.not_leaks.push_back(warm_up(warmups[size_t(memory)], memory, s0));
    return totals;
}

// Per device: its streams, the projected OOM step, and growth that is not a leak (fragmentation,
// activation peaks, free memory kept in torch's cache).
void name_growth_not_leaking(Replay& r, Findings& f, const Span& span, const std::vector<LiveAlloc>& live, SiteTotals& totals,
                     const Usage& usage, const AnalysisOptions& opt) {
    const Trace& t = r.context;
    const size_t S = span.S, s0 = span.s0;
    for (DeviceSummary& d : r.devices) {
        if (opt.device_memory) {
            d.total_memory = opt.device_memory;
            d.capacity_source = "--device-memory";
            uint64_t peak = 0;
            for (const StepPoint& p : d.timeline) peak = std::max(peak, p.peak_allocated);
            if (peak > opt.device_memory)  // said, never a quiet projection at the step in hand
                f.warnings.push_back("the device memory given (" + mib(double(opt.device_memory)) + ") is below the " +
                                     mib(double(peak)) + " the trace already allocated on " +
                                     f.device_name(d.device) + ": its OOM is projected at once");
        }
        std::map<uint64_t, uint64_t> live_by_stream;
        for (const LiveAlloc& a : live)
            if (a.device == d.device && r.sites[a.site].memory == Memory::torch) live_by_stream[t.streams[a.stream]] += a.size;
        for (const auto& [stream, bytes] : live_by_stream)
            d.streams.push_back(StreamUsage{stream, bytes, totals.leaked_by_stream[d.device][stream]});
        if (!span.judgeable) continue;
        const StepPoint& last = d.timeline[S - 1];
        // All the device holds counts: torch's peak, the libraries' own memory and the CUDA context.
        // (Torch's cached-free bytes do not: its allocator gives them back before it runs out.)
        d.projected_oom_step = projected_oom_step(S - 1, d.total_memory, last.peak_allocated + last.external + usage.context(d.device),
                                                  totals.leak_rate[d.device]);
        if (d.projected_oom_step && (!f.projected_oom_step || *d.projected_oom_step < *f.projected_oom_step))
            f.projected_oom_step = d.projected_oom_step;
        const StepPoint& first = d.timeline[s0];
        const double alloc_growth = double(last.allocated) - double(first.allocated);
        const double reserved_growth = double(last.reserved) - double(first.reserved);
        if (reserved_growth >= double(2 << 20) && alloc_growth <= 0.1 * reserved_growth) {
            NotLeak n;
            n.kind = NotLeakKind::fragmentation;
            n.bytes = uint64_t(reserved_growth);
            n.device = d.device;
            n.why = "reserved grew by " + mib(reserved_growth) + " over steps " + std::to_string(s0) + ".." +
                    std::to_string(S - 1) + " while allocated moved " + mib(alloc_growth) +
                    ": the caching allocator keeps freed blocks of sizes it cannot reuse for new requests "
                    "(varying shapes). Not a leak; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it";
            f.not_leaks.push_back(std::move(n));
        }
        double min_peak = 1e300, max_peak = 0;
        for (size_t k = s0; k < S; ++k) {
            min_peak = std::min(min_peak, double(d.timeline[k].peak_allocated));
            max_peak = std::max(max_peak, double(d.timeline[k].peak_allocated));
        }
        if (min_peak > 0 && max_peak > 1.2 * min_peak && std::fabs(alloc_growth) < 0.1 * (max_peak - min_peak)) {
            NotLeak n;
            n.kind = NotLeakKind::activation_peaks;
            n.bytes = uint64_t(max_peak - min_peak);
            n.device = d.device;
            n.why = "the peak inside a step ranges from " + mib(min_peak) + " to " + mib(max_peak) +
                    " while memory at step end moves " + mib(alloc_growth) + ": input sizes vary from step to step";
            f.not_leaks.push_back(std::move(n));
        }
        if (last.reserved > last.allocated && last.reserved - last.allocated >= std::max<uint64_t>(last.reserved / 10, 1 << 20)) {
            NotLeak n;
            n.kind = NotLeakKind::cached_free;
            n.bytes = last.reserved - last.allocated;
            n.device = d.device;
            n.why = mib(double(n.bytes)) + " of the " + mib(double(last.reserved)) +
                    " reserved is free memory kept in torch's cache for reuse (nvidia-smi counts it as used)";
            f.not_leaks.push_back(std::move(n));
        }
    }
}

// Memory the trace never saw allocated: a snapshot's state alone, or blocks from before its start.
void name_memory_before_trace(Replay& r, Findings& f, const std::vector<LiveAlloc>& live, bool starts_mid_run) {
    const Trace& t = r.context;
    if (!r.has_memory_events && !t.final_blocks.empty()) {
        const Holders h = largest_holders(t.final_blocks, r.resolver, t.stacks);
        f.notes.push_back("The snapshot shows " + mib(double(h.bytes)) + " allocated in " +
                          count_of(t.final_blocks.size(), "block") + " and " + mib(double(t.final_reserved)) +
                          " reserved. Largest holders:" + h.text);
    }
    if (!r.has_memory_events || !starts_mid_run) return;
    // Blocks the snapshot still lists but the trace never saw allocated: they predate it.
    std::unordered_set<uint64_t> seen_live;
    for (const LiveAlloc& a : live)
        if (r.sites[a.site].memory == Memory::torch) seen_live.insert(block_key(a.device, a.addr));
    std::vector<LiveBlock> before;
    for (const LiveBlock& b : t.final_blocks)
        if (!seen_live.count(block_key(b.device, b.addr))) before.push_back(b);
    uint64_t baseline = 0;
    for (const DeviceInfo& d : t.devices) baseline += d.baseline_allocated;
    if (before.empty() && baseline == 0) return;
    NotLeak n;
    n.kind = NotLeakKind::before_trace;
    if (before.empty()) {
        n.bytes = baseline;
        n.why = mib(double(baseline)) + " was allocated before the trace's first event; the trace cannot say where";
    } else {
        const Holders h = largest_holders(before, r.resolver, t.stacks);
        n.bytes = h.bytes;
        n.site = source_line(t.stacks, h.top_site);
        n.why = mib(double(h.bytes)) + " in " + std::to_string(before.size()) +
                " blocks allocated before the trace's first event and still live at its end (from the "
                "snapshot's segments, with the stacks torch kept); too old to judge. Largest holders:" + h.text;
    }
    f.not_leaks.push_back(std::move(n));
}

// The verdict: a leak where confirmed sites leak; "no leak" only when every device's ledger
// balances within its allowance; else "cannot judge", with the growth nobody explained named.
void give_verdict(Findings& f, const Span& span, const std::string& unit, const Usage& usage) {
    double total_rate = 0;
    for (const SiteFinding& l : f.leaks)
        if (confirmed(l.confidence)) {
            total_rate += l.bytes_per_step;
            if (l.memory == Memory::pinned) f.pinned_leak_bytes_per_step += l.bytes_per_step;
        }
    f.leak_bytes_per_step = total_rate;
    bool balanced = true;
    for (const DeviceLedger& l : f.ledger) {
        if (l.balanced()) continue;
        balanced = false;
        std::string why = mib(double(l.part(LedgerPart::unexplained))) + " of the " + mib(double(l.growth)) +
                          " growth of allocated memory on " + f.device_name(l.device) + " from step " +
                          std::to_string(l.from_step) + " to " + std::to_string(l.to_step) +
                          " is explained by no leak, cache, warm-up or variation (more than the " +
                          mib(double(l.unexplained_allowed)) + " a verdict may leave open). Held by:";
        for (size_t k = 0; k < l.unexplained_sites.size(); ++k) {
            why += (k ? ", " : " ") + mib(double(l.unexplained_sites[k].bytes)) + " at " +
                   site_words(l.unexplained_sites[k].site);
        }
        why += total_rate > 0 ? "." : ". Record more " + unit + "s to tell whether it keeps growing.";
        f.notes.insert(f.notes.begin(), std::move(why));
    }
    // Every byte NVML counts is accounted for too, where it was read.
    for (const std::string& why : usage.unexplained) {
        balanced = false;
        f.notes.insert(f.notes.begin(), why);
    }
    f.verdict = total_rate > 0 || !f.within_step.empty() ? Verdict::leak
                : span.judgeable && balanced        ? Verdict::no_leak
                                                    : Verdict::cannot_judge;
}

// Sites whose holdings grew across a step's units and were given back at its end
// (analysis/within_step.h): leaks no step end shows.
void within_step_leaks(Replay& r, Findings& f, SiteTotals& totals) {
    const Trace& t = r.context;
    for (size_t i = 0; i < r.sites.size(); ++i) {
        const SiteSeries& s = r.sites[i];
        if (!s.within) continue;
        const WithinStepRecord& w = *s.within;
        WithinStepLeak l;
        l.site = source_line(t.stacks, s.site_frame);
        l.stack = stack_lines(t.stacks, w.stack);
        l.stack_shown_from = machinery_frames(l.stack);
        l.device = s.device;
        l.memory = s.memory;
        l.unit = std::string(unit_of_marker(t.stacks.string(w.unit_marker)));
        l.bytes_per_unit = w.bytes_per_unit;
        l.fit_r2 = w.r2;
        l.units_per_step = w.units;
        l.step = w.step;
        l.steps_seen = w.steps_seen;
        l.bytes_added = uint64_t(std::max<int64_t>(0, w.bytes_added));
        for (const DeviceSummary& d : r.devices)
            if (d.device == s.device && w.step < d.timeline.size() && d.total_memory && s.memory != Memory::pinned) {
                const StepPoint& p = d.timeline[w.step];
                l.oom_units = projected_oom_step(w.units, d.total_memory, p.peak_allocated + p.external, w.bytes_per_unit);
            }
        if (i < totals.leaking.size()) totals.leaking[i] = true;
        f.within_step.push_back(std::move(l));
    }
    std::sort(f.within_step.begin(), f.within_step.end(),
              [](const WithinStepLeak& a, const WithinStepLeak& b) { return a.bytes_per_unit > b.bytes_per_unit; });
}

// Each device's highest moment, every byte in one category (analysis/peak.h).
void describe_peaks(Replay& r, Findings& f, const SiteTotals& totals, const std::vector<LiveAlloc>& live) {
    std::vector<PeakSiteKey> keys(r.sites.size());
    for (size_t i = 0; i < r.sites.size(); ++i)
        keys[i] = PeakSiteKey{r.sites[i].site_frame, i < totals.leaking.size() && totals.leaking[i]};
    for (size_t d = 0; d < r.devices.size(); ++d) {
        const PeakMoment& m = r.peak(d);
        if (m.bytes < 0) continue;
        const uint16_t device = r.devices[d].device;
        std::vector<PeakMember> at_end;
        for (const LiveAlloc& a : live) {
            if (a.device != device || a.seq >= m.seq_end || r.sites[a.site].memory != Memory::torch) continue;
            at_end.push_back(r.peak_member(a, m));
        }
        f.peaks.push_back(describe_peak(device, m, at_end, keys, r.backward_marked(), r.backward_inferred(), r.full_steps(),
                                        r.context.stacks));
    }
}

// The latest step conclude() may begin judging at, whatever the run's length (a trace that starts
// mid-run is judged from step 1 at the earliest).
uint32_t latest_judged_from(const AnalysisOptions& opt) {
    const int64_t from = opt.judged_from();
    return uint32_t(std::clamp<int64_t>(from >= 0 ? from : int64_t(kWarmupSteps), 1, UINT32_MAX));
}

Findings conclude(Replay& r, const Steps& steps, const AnalysisOptions& opt,
                  std::chrono::steady_clock::time_point started) {
    const Trace& t = r.context;
    r.finish();
    Findings f;
    f.source = t.source;
    f.format = t.format;
    f.warnings = t.warnings;
    f.window = opt.judge.window;
    for (const auto& kv : t.meta) f.meta.push_back(kv);
    f.steps_source = steps.source;
    f.steps_detail = steps.detail;
    f.step_unit = steps.unit;
    f.steps_before_trace = r.steps_before_trace;
    f.event_count = r.entries;
    Span span;
    span.S = r.full_steps();
    f.step_count = span.S;
    span.s0 = opt.judged_from(span.S);
    // The first step of a trace that starts mid-run is cut short: never judged.
    const bool starts_mid_run =
        f.steps_before_trace > 0 ||
        std::any_of(t.devices.begin(), t.devices.end(), [](const DeviceInfo& d) { return d.baseline_allocated > 0; });
    if (starts_mid_run && span.S > 0) span.s0 = std::max<size_t>(span.s0, 1);
    f.warmup_steps = span.s0;
    span.w = f.window;
    span.min_steps = opt.judge.min_steps;
    span.judgeable = r.has_memory_events && span.S >= span.s0 + std::max<size_t>(span.min_steps, span.w + 3);
    span.last_judged = span.judgeable ? span.S - 1 - span.w : 0;
    note_steps(f, r, steps, span);

    const std::vector<LiveAlloc> live = r.live_allocs();
    SiteTotals totals = judge_sites(r, f, span, live);
    Usage usage;
    if (span.S > 0) {
        for (HolderSeries& h : r.holders) h.record_held(uint32_t(span.S));
        for (PoolSeries& p : r.pools) p.in_use.record_held(uint32_t(span.S)), p.pool.record_held(uint32_t(span.S));
        usage = usage_ledgers(r.devices, r.nvml, r.holders, span.s0, span.S - 1, span.judgeable, r.pools);
    }
    name_growth_not_leaking(r, f, span, live, totals, usage, opt);
    within_step_leaks(r, f, totals);
    describe_peaks(r, f, totals, live);
    name_memory_before_trace(r, f, live, starts_mid_run);
    for (LedgerBuilder& l : totals.ledgers) f.ledger.push_back(l.finish());
    give_verdict(f, span, steps.unit.empty() ? "step" : steps.unit, usage);
    for (std::string& note : unseen_memory_notes(t)) f.notes.push_back(std::move(note));
    for (std::string& note : usage.notes) f.notes.push_back(std::move(note));
    f.usage = std::move(usage.ledgers);
    // Nothing to judge is no "no leak" either: the notes above say what is missing.
    if (!r.has_memory_events) f.input_faults.push_back(t.source + ": no memory events: nothing to judge");
    f.devices = std::move(r.devices);
    f.allocated_any = r.has_block_events;
    f.first_step_shown = opt.first_step;
    f.analysis_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return f;
}

// One read of a .vscope file: its replay, with the steps it cut and what it counted.
struct FileRead {
    Trace t;
    EventValidator validator;
    Replay r;
    GuessedSteps guess;
    StepFinder finder;
    uint64_t entries = 0;
    bool allocated_any = false;
    explicit FileRead(const AnalysisOptions& opt)
        : r(t, opt.judge.window, opt.last_step, latest_judged_from(opt), &validator),
          guess(t.stacks),
          finder(t.stacks) {}
};

// Reads the file through, its steps cut where `placed` says, else guessed as the events pass while
// the finder looks at every source. A chunk that fails to decode after handing on part of its
// events (more of them than the reader's cache holds) is read whole: the file is read again from
// its start, that chunk decoded in one piece.
std::unique_ptr<FileRead> read_file(const std::string& path, const AnalysisOptions& opt, const ReadLimits& limits,
                                    const Steps* placed) {
    size_t whole_chunk = SIZE_MAX;
    while (true) {
        auto read = std::make_unique<FileRead>(opt);
        Replay& r = read->r;
        GuessedSteps& guess = read->guess;
        StepFinder& finder = read->finder;
        EventValidator& validator = read->validator;
        std::optional<PlacedSteps> placed_cuts;
        if (placed) placed_cuts.emplace(*placed);
        uint64_t entries = 0;
        bool allocated_any = false;
        ReadAheadFile file(path, limits.max_decoded_bytes);
        const std::optional<size_t> again = stream_trace({}, file, file.expected_bytes(), path, limits, read->t, [&](Trace& chunk) {
            uint64_t frees = 0, block_events = 0;
            for (const Event& e : chunk.events) {
                frees += e.kind == EventKind::free;
                block_events += is_block_event(e.kind);
                // Nothing past a fault is analysed (its numbers could overflow), only checked.
                if (!r.replaying()) {
                    r.take(e);
                    continue;
                }
                if (placed_cuts) {
                    placed_cuts->feed(r, e);
                } else {
                    finder.see(e);
                    guess.feed(r, e);
                }
            }
            // Counted in locals, as the loop cannot keep a captured counter in a register.
            entries += chunk.events.size() + frees;
            allocated_any |= block_events > 0;
            chunk.events.clear();
            return validator.faulted() || r.wants_more();
        }, kEventsInCache, whole_chunk);
        if (!again) {
            read->entries = entries;
            read->allocated_any = allocated_any;
            return read;
        }
        whole_chunk = *again;
    }
}

}  // namespace

Findings analyze(const Trace& t, const AnalysisOptions& opt) {
    const auto started = std::chrono::steady_clock::now();
    if (!t.faults.empty())
        return cannot_judge(t, t.entry_count(), std::any_of(t.events.begin(), t.events.end(), [](const Event& e) {
                                return is_block_event(e.kind);
                            }));
    const Steps steps = find_steps(t);
    opt.judge.check();
    Replay r(t, opt.judge.window, opt.last_step, latest_judged_from(opt));
    PlacedSteps cuts(steps);
    for (const Event& e : t.events) {
        if (!r.wants_more()) break;
        cuts.feed(r, e);
    }
    return conclude(r, steps, opt, started);
}

Findings analyze_file(const std::string& path, const AnalysisOptions& opt, const ReadLimits& limits) {
    opt.judge.check();
    const auto started = std::chrono::steady_clock::now();
    {
        FileChunks probe(path, limits.max_decoded_bytes, format::kHeaderBytes);
        std::string_view head;
        probe.next(head);
        if (!has_vscope_magic(head)) {
            const Trace t = load_any(path, limits);
            const double import_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            Findings f = analyze(t, opt);
            f.import_seconds = import_seconds;
            return f;
        }
    }
    // The steps are guessed as the events pass (our markers, else the first optimizer's steps)
    // while a StepFinder looks at every source: only when its answer differs (no markers and no
    // optimizer annotations, or several optimizers) is the file read again, cut where it placed them.
    std::unique_ptr<FileRead> guessed = read_file(path, opt, limits, nullptr);
    guessed->guess.finish(guessed->r);  // the events it held are checked too
    guessed->validator.finish(guessed->t);
    if (!guessed->t.faults.empty()) return cannot_judge(guessed->t, guessed->entries, guessed->allocated_any);
    const Steps found = guessed->finder.finish();
    if (!found.period_anchor && found.ends == guessed->guess.ends()) return conclude(guessed->r, found, opt, started);
    guessed.reset();  // one read in memory at a time
    const std::unique_ptr<FileRead> placed = read_file(path, opt, limits, &found);
    placed->validator.finish(placed->t);
    if (!placed->t.faults.empty()) return cannot_judge(placed->t, placed->entries, placed->allocated_any);
    return conclude(placed->r, found, opt, started);
}

}  // namespace vramscope
