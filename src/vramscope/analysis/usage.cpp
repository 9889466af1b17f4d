#include "analysis/usage.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "analysis/ledger.h"
#include "common/format.h"

namespace vramscope {
namespace {

// The reading whose figure the ledger takes, and the step end it stands for: the last judged step
// end's that read NVML. The reading at close (in the unfinished step's point after step end `last`)
// stands for the last step end when that one read none, the device's holdings (torch's segments,
// memory outside its allocator) are as they were at it, and it leaves no less unexplained than the
// reading before it, by more than a verdict may leave open: a teardown that freed what no allocation
// recorded must not hide the growth the run's readings showed (both are checked, in usage_ledgers()).
struct Reading {
    size_t step;
    const NvmlReading* reading;
};
std::optional<Reading> ledger_reading(const std::vector<NvmlReading>& readings, const std::vector<StepPoint>& timeline,
                                      size_t first, size_t last) {
    const NvmlReading *in_run = nullptr, *close = nullptr;
    for (const NvmlReading& r : readings) {
        if (!r.stands) continue;
        if (r.step <= last) in_run = &r;
        else if (r.step == last + 1 && timeline.size() == last + 2) close = &r;
    }
    if (in_run && in_run->step < first) in_run = nullptr;
    const std::optional<Reading> run = in_run ? std::optional<Reading>(Reading{in_run->step, in_run}) : std::nullopt;
    const StepPoint& end = timeline[last];
    if ((in_run && in_run->step == last) || !close || uint64_t(std::max<int64_t>(0, close->reserved)) != end.reserved ||
        uint64_t(std::max<int64_t>(0, close->external)) != end.external)
        return run;
    if (in_run && close->residual() + unexplained_allowance(0) < in_run->residual()) return run;
    return Reading{last, close};
}

// The reading the context is taken from, as NVML saw it once warm-up was over: the last at or
// before the first judged step end, else the first read after that step end within the judged
// steps. Not the one taken as a device is first watched, before the first step's segments (it
// stands for no step end): against it, the first step's module loads would read as growth.
const NvmlReading* base_reading(const std::vector<NvmlReading>& readings, size_t first, size_t last) {
    const NvmlReading* base = nullptr;
    for (const NvmlReading& r : readings)
        if (r.step <= first && (r.stands || r.step > 0)) base = &r;
    if (base) return base;
    for (const NvmlReading& r : readings)
        if (r.step > first && r.step <= last) return &r;
    return nullptr;
}

// Where the context's reading came before the first judged step end (`first`): what warm-up
// loaded after it counts as growth, and how to record a reading there.
std::string read_before_warm_up_ended(const NvmlReading& base, size_t first) {
    if (base.step >= first) return "";
    return " The CUDA context was read at step " + std::to_string(base.step) + ", before warm-up ended (step " +
           std::to_string(first) + "), so what warm-up loaded after it is counted here too: a capture reads NVML "
           "where the warm-up it is given ends (track(warmup=" + std::to_string(first) + "), vramscope run --warmup " +
           std::to_string(first) + ").";
}

// Of `grown`, a residual's change from `since` to `now`, what the driver's pages of the outside
// allocations may account for (analysis/driver_pages.h): their bound's change between the two
// moments, no more than a gain. Pages given back count too (negative): the residual's fall with them
// hides nothing nobody recorded.
int64_t page_rounding_of(int64_t grown, const NvmlReading& now, const NvmlReading& since) {
    return std::min(now.page_rounding - since.page_rounding, std::max<int64_t>(0, grown));
}

// Each holder's bytes at the step end `last` and its growth from `first`, largest first; holders
// that held nothing at either are left out.
std::vector<LibraryBytes> holders_of(const std::vector<HolderSeries>& holders, std::optional<uint16_t> device, Memory memory,
                                     size_t first, size_t last) {
    std::vector<LibraryBytes> out;
    std::unordered_map<std::string_view, size_t> index;  // the host's: one holder's bytes on every device
    for (const HolderSeries& h : holders) {
        if (h.memory != memory || (device && h.device != *device)) continue;
        const auto bytes = uint64_t(h.at_end(last));
        const int64_t growth = int64_t(bytes) - int64_t(h.at_end(first));
        if (bytes == 0 && growth == 0) continue;
        const auto [at, added] = index.try_emplace(h.library, out.size());
        if (added) out.push_back(LibraryBytes{h.library, bytes, growth});
        else out[at->second].bytes += bytes, out[at->second].growth += growth;
    }
    std::sort(out.begin(), out.end(), [](const LibraryBytes& a, const LibraryBytes& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.library < b.library;
    });
    return out;
}

// A library that counted its pool: its part split into what its arrays hold and what the pool keeps
// beyond them, as it counted them at the step end `at`. A pool taken before the capture began has
// no driver bytes the capture saw: listed with none, its count alone.
void split_pools(std::vector<LibraryBytes>& libraries, const std::vector<PoolSeries>& pools, uint16_t device, size_t at) {
    for (const PoolSeries& p : pools) {
        if (p.device != device || !p.in_use.ever_touched) continue;
        auto it = std::find_if(libraries.begin(), libraries.end(), [&](const LibraryBytes& l) { return l.library == p.library; });
        if (it == libraries.end()) it = libraries.insert(libraries.end(), LibraryBytes{p.library, 0, 0, {}, {}});
        const auto in_use = uint64_t(std::max(0.0, p.in_use.at_end(at)));
        const auto pool = uint64_t(std::max(0.0, p.pool.at_end(at)));
        it->in_use = in_use;
        it->cached = pool > in_use ? pool - in_use : 0;
    }
}

}  // namespace

uint64_t Usage::context(uint16_t device) const {
    for (const UsageLedger& l : ledgers)
        if (l.device == device && l.context) return *l.context;
    return 0;
}

Usage usage_ledgers(const std::vector<DeviceSummary>& devices, const std::vector<std::vector<NvmlReading>>& readings,
                    const std::vector<HolderSeries>& holders, size_t first, size_t last, bool judged,
                    const std::vector<PoolSeries>& pools) {
    Usage u;
    first = std::min(first, last);
    for (size_t i = 0; i < devices.size(); ++i) {
        const DeviceSummary& d = devices[i];
        if (last >= d.timeline.size()) continue;
        const std::vector<NvmlReading>& read = readings.at(i);
        const std::optional<Reading> now = ledger_reading(read, d.timeline, first, last);
        const size_t at = now ? now->step : last;  // NVML's figure and its parts of one moment
        const StepPoint& end = d.timeline[at];
        UsageLedger l;
        l.device = d.device;
        l.step = at;
        l.torch_reserved = end.reserved;
        l.libraries = holders_of(holders, d.device, Memory::external, first, at);
        split_pools(l.libraries, pools, d.device, at);
        const NvmlReading* base = base_reading(read, first, last);
        const int64_t context = base ? std::max<int64_t>(0, base->residual()) : 0;
        // What is checked against the context, each reading against its own allowance: the last
        // reading within the judged steps (standing for its step end or not), the ledger's, and
        // the one at close. Past the allowance, growth no recorded allocation explains keeps the
        // verdict from "no leak"; the reading at close is of the unfinished step, never judged, so
        // when the last step end's own reading bounds the judged steps, what it shows is only said.
        const bool last_read = d.timeline[last].nvml_used.has_value();
        const bool close_taken = now && now->step == last && !last_read;
        const NvmlReading* latest = nullptr;  // within the judged steps, after the base
        const NvmlReading* close = nullptr;   // after the last step end
        for (const NvmlReading& r : read) {
            if (base && &r > base && r.step <= last) latest = &r;
            if (r.step == last + 1 && d.timeline.size() == last + 2) close = &r;
        }
        const NvmlReading* ledgers = now && !close_taken ? now->reading : nullptr;  // the ledger's, read within the run
        // Of the residual's gain from `since` (the base: the context) to `r`, what the driver's
        // pages account for, and the rest: what no recorded allocation explains.
        const auto gained = [&](const NvmlReading& r, const NvmlReading& since) {
            const int64_t grown = r.residual() - (&since == base ? context : since.residual());
            const int64_t pages = page_rounding_of(grown, r, since);
            return std::pair{pages, grown - pages};
        };
        if (now) {  // its holdings are the step end's: it stands for it
            l.nvml_used = now->reading->used;
            l.context = uint64_t(base ? context : std::max<int64_t>(0, now->reading->residual()));
            const auto [pages, unexplained] =
                base ? gained(*now->reading, *base) : std::pair{int64_t(0), now->reading->residual() - int64_t(*l.context)};
            l.page_rounding = pages;
            l.unexplained = unexplained;
        }
        bool checked = false, blocked = false;  // one sentence a device
        // `r` against `since`: the base, or for what came after the judged steps, the last step end's.
        const auto check = [&](const NvmlReading& r, const NvmlReading& since, bool blocks) {
            checked |= blocks;  // a note on what came after the judged steps checks none of them
            const int64_t unexplained = gained(r, since).second;
            // 2% of NVML's growth: a fall (segments given back) widens nothing.
            const int64_t allowed = unexplained_allowance(std::max<int64_t>(0, int64_t(r.used) - int64_t(since.used)));
            if (unexplained <= allowed || (blocks && std::exchange(blocked, true))) return;
            const std::string where = "cuda:" + std::to_string(d.device);
            if (blocks)
                u.unexplained.push_back(
                    "NVML says the process grew by " + format_bytes(double(unexplained)) + " on " + where + " from step " +
                    std::to_string(base->step) + " to " +
                    (r.step <= last ? std::to_string(r.step)
                                    : "the run's end (after step " + std::to_string(last) + ", whose end NVML did not read)") +
                    " that no recorded allocation explains (more than the " + format_bytes(double(allowed)) +
                    " a verdict may leave open): memory taken past the driver calls vramscope records, or the CUDA "
                    "context growing (modules loaded late)." + read_before_warm_up_ended(*base, first));
            else
                u.notes.push_back("NVML's reading as the run ended shows " + format_bytes(double(unexplained)) + " more on " +
                                  where + " than at the last step end (" + std::to_string(last) +
                                  ") that no recorded allocation explains: memory taken past the driver calls vramscope "
                                  "records, or the CUDA context growing (modules loaded late), after the judged steps: "
                                  "the verdict stands.");
        };
        if (judged && base) {
            if (latest) check(*latest, *base, true);
            if (ledgers && ledgers > base && ledgers != latest) check(*ledgers, *base, true);
            // Where the last step end's own reading bounds the judged steps, what came after it is
            // the unfinished step's: said, from that reading on. Else it may be the judged steps'.
            if (close && last_read) check(*close, latest ? *latest : *base, false);  // the last step end's
            else if (close) check(*close, *base, true);
        }
        // Like a capture without NVML: said, and the verdict stands on what was recorded.
        if (judged && !checked && !read.empty()) {
            const std::string what = now ? "at one step end only from the end of warm-up on (" + std::to_string(at) + "), with none before it"
                                         : "but at no judged step end (" + std::to_string(first) + " to " + std::to_string(last) + ")";
            u.notes.push_back("NVML was read on cuda:" + std::to_string(d.device) + " " + what +
                              ": memory that no recorded allocation explains could not be checked there. NVML is "
                              "read a thousandth of the run's time at most: record or judge more steps.");
        }
        u.ledgers.push_back(std::move(l));
    }
    std::vector<LibraryBytes> pinned = holders_of(holders, std::nullopt, Memory::pinned, first, last);
    if (!pinned.empty()) {
        UsageLedger host;
        host.step = last;
        host.libraries = std::move(pinned);
        u.ledgers.push_back(std::move(host));
    }
    return u;
}

std::vector<std::string> unseen_memory_notes(const Trace& t) {
    std::vector<std::string> notes;
    const auto meta = [&](const char* key) {
        const auto it = t.meta.find(key);
        return it == t.meta.end() ? std::string() : it->second;
    };
    if (t.format == "torch-snapshot" || meta("format") == "torch-snapshot")
        notes.push_back("A torch snapshot holds only torch's caching allocator: memory that NCCL, CuPy, JAX or an "
                        "extension take from the CUDA driver themselves, pinned host memory and the CUDA context are not "
                        "in it. `vramscope run` records them.");
    if (const std::string driver = meta("capture.driver"); driver.starts_with("off"))
        notes.push_back("Memory outside torch's caching allocator was not recorded (" + driver +
                        "): device memory that NCCL, CuPy, JAX or an extension take themselves, and pinned host memory, "
                        "are not in this trace.");
    if (const std::string nvml = meta("capture.nvml"); nvml.starts_with("off"))
        notes.push_back("NVML was not read (" + nvml +
                        "): the usage ledger cannot tell the CUDA context from memory no recorded allocation explains.");
    return notes;
}

}  // namespace vramscope
