// The words findings are made of, as types: C++ switches over them (the compiler finds a case
// left out), Python receives them as enums (src/python/module.cpp), and JSON spells them with
// the names below, which docs/findings.md lists. Never a hand-copied string or number.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vramscope {

enum class Verdict : uint8_t {
    no_leak,       // judged, and nothing accumulates
    leak,          // at least one site's memory accumulates
    cannot_judge,  // too few steps, no memory events, or input that cannot be trusted: never "no leak"
};

// What a site's bytes at step ends look like once warm-up is over (analysis/judge.h decides).
enum class Shape : uint8_t {
    level,          // neither rises nor keeps anything new
    rising,         // a leak: rises along a line to the end
    slowing,        // a leak whose growth slows but has not stopped
    bounded,        // rose, then flat for the last steps: a cache with a bound
    warm_up,        // kept from the first steps, no rise since
    too_short,      // rose, but too few steps to tell a leak from a cache
};

enum class NotLeakKind : uint8_t {
    warm_up,
    bounded_cache,
    fragmentation,
    activation_peaks,
    cached_free,
    before_trace,   // live before the trace's first event (a ring buffer that wrapped, a late start)
};
inline constexpr size_t kNotLeakKinds = 6;

// How a leak site's holdings at step ends grow (analysis/ledger.h tells them apart).
enum class LeakEvidence : uint8_t {
    survivors,        // its blocks outlive their step and pile up
    replaced_bigger,  // each step frees its buffer and allocates a bigger one: nothing survives, yet it grows
    pool_in_use,      // a library's pool counts its live arrays' bytes, and those grow (JAX's bytes_in_use, CuPy's
                      // used_bytes()): the driver sees only the pool's doublings, or nothing of a pool taken at once
};

// Where a device's growth of allocated bytes at step ends went: every byte in exactly one part
// (analysis/ledger.h is the rule).
enum class LedgerPart : uint8_t {
    leak,           // sites judged to leak, confirmed
    bounded_cache,  // sites whose survivors rose to a bound
    warm_up,        // sites that took their memory in the warm-up steps, or once, and kept it
    variation,      // sites whose holdings at step ends go up and down: activations, varying batches
    before_trace,   // blocks allocated before the trace began, freed during it
    unexplained,    // growth no rule accounts for: a "no leak" may not stand beside much of it
};
inline constexpr size_t kLedgerParts = 6;

// Where a site's memory lives and who hands it out.
enum class Memory : uint8_t {
    torch,     // device memory from torch's caching allocator
    external,  // device memory a library took from the CUDA driver itself (NCCL, CuPy, JAX, an extension)
    pinned,    // page-locked host memory (torch's host allocator, NCCL, any library)
};

enum class StepsSource : uint8_t { markers, optimizer_annotations, optimizer_frames, inferred_period, none };

// The part of a training step memory was allocated or freed in (analysis/phases.h: how the trace's
// markers begin and end each).
enum class Phase : uint8_t {
    setup,      // before the trace's first marker: the model built and moved, often the first forward
    forward,    // after a step's end or a backward's end, until a backward or an optimizer step begins
    backward,   // inside torch.autograd.backward
    optimizer,  // inside optimizer.step()
};
inline constexpr size_t kPhases = 4;

// What a block live at a device's peak is, by its lifetime and the phase it was allocated in
// (analysis/peak.h is the rule): every byte of the peak in exactly one.
enum class PeakCategory : uint8_t {
    parameters,       // allocated before the first marker and kept through the run: parameters, buffers
    gradients,        // allocated in a backward and kept past it: .grad, accumulated gradients
    optimizer_state,  // allocated in an optimizer step and kept past it
    activations,      // allocated in a forward, freed in a backward: saved for backward
    temporaries,      // allocated and freed within one phase
    leaks,            // of a site judged to leak, across steps or inside one
    before_trace,     // allocated before the trace began: where, it cannot say
    other,            // anything else (kept from one forward to a later one, ...): named by its site
};
inline constexpr size_t kPeakCategories = 8;

// Several runs as one: a leak anywhere is a leak; else a run that cannot be judged says so.
inline Verdict worse(Verdict a, Verdict b) {
    if (a == Verdict::leak || b == Verdict::leak) return Verdict::leak;
    return a == Verdict::cannot_judge || b == Verdict::cannot_judge ? Verdict::cannot_judge : Verdict::no_leak;
}

inline bool is_leak(Shape s) { return s == Shape::rising || s == Shape::slowing; }

std::string_view name(Verdict v);
std::string_view name(Shape s);
std::string_view name(NotLeakKind k);
std::string_view name(StepsSource s);
std::string_view name(LeakEvidence e);
std::string_view name(LedgerPart p);
std::string_view name(Memory m);
std::string_view name(Phase p);
std::string_view name(PeakCategory c);
// Where steps came from, in words for the summary line ("steps: 30 from ...").
std::string_view describe(StepsSource s);

}  // namespace vramscope
