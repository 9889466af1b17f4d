// The words findings are made of, as types: C++ switches over them (the compiler finds a case
// left out), Python receives them as enums (src/python/module.cpp), and JSON spells them with
// the names below, which docs/findings.md lists. Never a hand-copied string or number.
#pragma once
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

enum class StepsSource : uint8_t { markers, optimizer_annotations, optimizer_frames, inferred_period, none };

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
// Where steps came from, in words for the summary line ("steps: 30 from ...").
std::string_view describe(StepsSource s);

}  // namespace vramscope
