#include "analysis/live_sink.h"

#include <string>
#include <utility>

#include "analysis/libraries.h"
#include "analysis/sites.h"

namespace vramscope {
namespace {
uint64_t library_key(uint8_t device, Memory memory, uint32_t site) {
    return uint64_t(device) << 56 | uint64_t(memory) << 48 | site;
}
}  // namespace

void LiveSink::device(uint8_t device, uint64_t capacity, uint64_t allocated_before) {
    std::lock_guard lock(mutex_);
    monitor_.set_capacity(device, capacity, allocated_before);
}

// The site rule of the offline analysis (SiteResolver's), on the frames as the recorder named them.
void LiveSink::stack(uint32_t stack, std::span<const SinkFrame> frames) {
    std::lock_guard lock(mutex_);
    SitePick pick;
    const SinkFrame* chosen = nullptr;
    for (const SinkFrame& f : frames) {
        auto [rank, added] = rank_of_frame_.try_emplace(f.id, 0);
        if (added) rank->second = int8_t(rank_frame(f.file, f.function));
        const uint32_t before = pick.site;
        const bool done = pick.see(f.id, FrameRank(rank->second));
        if (pick.site != before) chosen = &f;
        if (done) break;
    }
    // The split SiteResolver::key makes: under a user's site, the library function that allocates.
    const SinkFrame* via = nullptr;
    if (chosen && pick.rank == FrameRank::user)
        for (const SinkFrame& f : frames) {
            const LibraryFrameKind kind = library_frame_kind(f.file);
            if (kind == LibraryFrameKind::passes_through) continue;
            if (f.id != chosen->id && kind == LibraryFrameKind::installed) via = &f;
            break;
        }
    uint32_t via_number = 0;
    if (via) {
        const std::string key = std::string(via->file) + '\0' + std::string(via->function);
        via_number = library_functions_.try_emplace(key, uint32_t(library_functions_.size() + 1)).first->second;
    }
    uint32_t site = 0;
    if (chosen) {
        auto [id, added] = site_ids_.try_emplace(uint64_t(chosen->id) << 32 | via_number, uint32_t(site_ids_.size() + 1));
        site = id->second;
        if (added) {
            SiteLines& lines = site_lines_[site];
            lines.site = SourceLine{std::string(chosen->file), chosen->line, std::string(chosen->function)};
            if (via) lines.allocated_in = SourceLine{std::string(via->file), via->line, std::string(via->function)};
        }
    }
    if (!frames.empty() && is_shared_object(frames[0].file)) library_of_stack_.try_emplace(stack, library_name(frames[0].file));
    if (stack >= site_of_stack_.size()) site_of_stack_.resize(stack + 1, 0);
    site_of_stack_[stack] = site;
}

void LiveSink::name(uint32_t id, std::string_view text) {
    std::lock_guard lock(mutex_);
    names_[id] = std::string(text);
}

uint16_t LiveSink::library_number(const std::string& library) {
    auto [it, added] = library_numbers_.try_emplace(library, uint16_t(libraries_.size()));
    if (added) {
        if (libraries_.size() > 0xFFFF) return library_numbers_.erase(it), 0;  // more libraries than a capture meets
        libraries_.push_back(library);
    }
    return it->second;
}

void LiveSink::events(std::span<const Event> events) {
    std::lock_guard lock(mutex_);
    for (const Event& e : events) {
        seen_memory_ |= is_memory_event(e.kind);
        if (e.kind == EventKind::alloc || is_external_alloc(e.kind)) {
            const uint32_t site = e.stack < site_of_stack_.size() ? site_of_stack_[e.stack] : 0;
            if (is_external_alloc(e.kind)) {
                const auto found = library_of_stack_.find(e.stack);
                const std::string& library = library_of_site_[library_key(e.device, memory_of(e.kind), site)] =
                    found != library_of_stack_.end() ? found->second : library_name(kUnknownLibrary);
                monitor_.alloc(e.device, e.addr, e.size, site, memory_of(e.kind), library_number(library));
            } else {
                monitor_.alloc(e.device, e.addr, e.size, site, memory_of(e.kind));
            }
        } else if (is_release(e.kind) || is_external_event(e.kind)) {  // external: its allocs are taken above
            monitor_.release(e.device, e.addr, memory_of(e.kind));
        } else if (e.kind == EventKind::pool_usage && seen_memory_) {  // readings before are of steps the analysis forgets
            const auto library = names_.find(e.name);
            if (library != names_.end()) monitor_.pool(e.device, library_number(library->second), e.size, e.addr);
        } else if (e.kind == EventKind::microbatch) {
            monitor_.end_unit(e.name);
        } else if (e.kind == EventKind::step && seen_memory_) {  // the steps the analysis numbers
            for (LiveFinding& f : described(monitor_.end_step())) said_.push_back(std::move(f));
        }
    }
}

std::vector<LiveFinding> LiveSink::take_said() {
    std::lock_guard lock(mutex_);
    return std::exchange(said_, {});
}

std::vector<LiveFinding> LiveSink::leaking() const {
    std::lock_guard lock(mutex_);
    return described(monitor_.leaking());
}

std::vector<LiveFinding> LiveSink::rising_in_step() const {
    std::lock_guard lock(mutex_);
    return described(monitor_.rising_in_step());
}

std::optional<uint64_t> LiveSink::projected_oom_step() const {
    std::lock_guard lock(mutex_);
    return monitor_.projected_oom_step();
}

// The monitor's frame ids as source lines.
std::vector<LiveFinding> LiveSink::described(std::vector<LiveLeak> leaks) const {
    std::vector<LiveFinding> out;
    for (LiveLeak& leak : leaks) {
        auto site = site_lines_.find(leak.site);
        auto library = library_of_site_.find(library_key(leak.device, leak.memory, leak.site));
        // A pool's count: its library's, at the site of its latest driver allocation, or (its pool
        // taken before the capture began) the pool itself, as the offline analysis names it.
        const std::string pool = leak.pool_library < libraries_.size() ? libraries_[leak.pool_library] : "";
        const SourceLine where = site != site_lines_.end() ? site->second.site
                                 : !pool.empty()           ? SourceLine{pool + "'s pool", 0, ""}
                                                           : SourceLine{kNoPythonFrame, 0, ""};
        out.push_back(LiveFinding{where, site != site_lines_.end() ? site->second.allocated_in : std::nullopt, leak.memory,
                                  !pool.empty() ? pool : library != library_of_site_.end() ? library->second : "", leak.device, leak.shape, leak.evidence, leak.bytes_per_step, leak.first_step,
                                  leak.projected_oom_step, std::move(leak.newest_blocks)});
    }
    return out;
}

}  // namespace vramscope
