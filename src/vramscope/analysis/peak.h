// Why a device's peak is what it is: the moment its allocated memory was highest, and every block
// live then in exactly one category, by the block's lifetime and the phases it was allocated and
// freed in (analysis/phases.h), never by frame names. The rule, in words (docs/findings.md says
// the same), first match wins:
// - leaks: its site was judged to leak, across steps or inside one (within_step.h);
// - parameters: allocated in setup (before the first marker) and kept through the run (never
//   freed, or freed after the last full step);
// - temporaries: allocated and freed within the phase the peak fell in;
// - gradients: allocated in a backward, kept past it;
// - optimizer state: allocated in an optimizer step, kept past it;
// - activations: allocated in a forward (or in setup), freed in a backward;
// - other: anything else, named by its site;
// - before the trace: the peak's bytes of blocks allocated before the trace began.
// Without backward markers (a torch snapshot, an older capture), backwards are inferred from the
// autograd engine's allocations (phases.h); where none is, a forward's block freed in its step is a
// temporary and any other is other: activations and gradients are not told apart (optimizer state,
// from torch's annotations, and parameters still are).
//
// How it is found in one pass (Replay keeps a PeakMoment per device): at each new high, the blocks
// freed before it are forgotten; a block allocated before the high and freed after it is written
// down with its free's phase; the blocks live at the end of the trace are the replay's own. Memory:
// the blocks live at the peak, no more. The live monitor's peak reads the same rule (peak_category).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "analysis/steps.h"
#include "events/event.h"
#include "events/stack_table.h"
#include "findings/findings.h"

namespace vramscope {

// The nn.Module whose forward is running, by instance path, from the annotations a capture opens
// and closes around each module call when it records module paths (opt-in: a hook on every module
// call). Without them a block's module is the class its stack names (sites.h module_of).
class ModuleStack {
public:
    explicit ModuleStack(const StackTable& names) : kinds_(names) {}
    void see(const Event& e) {
        if (kinds_.of(e.name) != AnnotationKinds::module) return;
        if (e.kind == EventKind::annotation_start) return open_.push_back(e.name);
        // A call that raised may have skipped its close: the innermost call of this module closes.
        for (size_t i = open_.size(); i-- > 0;)
            if (open_[i] == e.name) return open_.resize(i);
    }
    uint32_t now() const { return open_.empty() ? 0 : open_.back(); }  // its annotation's name; 0: none

private:
    AnnotationKinds kinds_;
    std::vector<uint32_t> open_;
};
// A module annotation's instance path ("model.layers.3.mlp").
inline std::string_view module_path(const StackTable& names, uint32_t annotation) {
    return names.string(annotation).substr(kModuleAnnotationPrefix.size());
}

// A block live at the peak, as the rule reads it.
struct PeakMember {
    uint64_t size = 0;
    uint32_t site = 0, stack = 0;
    uint32_t module = 0;               // the module annotation it was allocated under (ModuleStack); 0: none
    uint32_t alloc_step = 0;
    Phase alloc_phase = Phase::setup;
    bool in_peak_phase = false;        // allocated in the phase the peak fell in
    bool freed = false;
    bool freed_in_peak_phase = false;  // freed before that phase ended
    Phase free_phase = Phase::setup;
    uint32_t free_step = 0;
};

// The rule above for one block: full_steps is the trace's full step count.
// backward_known: the trace marks backwards, or they were inferred (phases.h).
PeakCategory peak_category(const PeakMember& m, bool site_leaks, bool backward_known, size_t full_steps);

// A device's highest moment so far, while the events pass.
struct PeakMoment {
    int64_t bytes = -1;             // allocated then (-1: no event yet)
    uint64_t seq_end = 0;           // blocks allocated before it (seq < seq_end) and not freed were live then
    uint64_t phase_start_seq = 0;   // the first allocation of the phase it fell in
    uint64_t phase_count = 0;       // PhaseClock::count() then
    uint32_t step = 0, microbatch = 0;
    uint32_t stack = 0;             // of the allocation that made it
    uint32_t module = 0;            // the module annotation open then (ModuleStack); 0: none
    Phase phase = Phase::setup;
    int64_t reserved = 0, external = 0, pinned = 0;
    std::vector<PeakMember> freed;  // live then, freed since
};

// One site as the peak's sites name it: its frame and device.
struct PeakSiteKey {
    uint32_t frame = 0;
    bool leaks = false;
};

// The findings' peak of one device: the members (those freed after it and those live at the end),
// summed by category, by site and by module.
DevicePeak describe_peak(uint16_t device, const PeakMoment& moment, std::span<const PeakMember> live_at_end,
                         std::span<const PeakSiteKey> sites, bool backward_marked, bool backward_inferred, size_t full_steps,
                         const StackTable& table);

}  // namespace vramscope
