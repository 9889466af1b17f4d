#include "findings/vocabulary.h"

namespace vramscope {

std::string_view name(Verdict v) {
    switch (v) {
    case Verdict::no_leak: return "no-leak";
    case Verdict::leak: return "leak";
    case Verdict::cannot_judge: return "cannot-judge";
    }
    return "?";
}

std::string_view name(Shape s) {
    switch (s) {
    case Shape::level: return "level";
    case Shape::rising: return "rising";
    case Shape::slowing: return "slowing";
    case Shape::bounded: return "bounded";
    case Shape::warm_up: return "warm-up";
    case Shape::too_short: return "too-short";
    }
    return "?";
}

std::string_view name(NotLeakKind k) {
    switch (k) {
    case NotLeakKind::warm_up: return "warm-up";
    case NotLeakKind::bounded_cache: return "bounded-cache";
    case NotLeakKind::fragmentation: return "fragmentation";
    case NotLeakKind::activation_peaks: return "activation-peaks";
    case NotLeakKind::cached_free: return "cached-free";
    case NotLeakKind::before_trace: return "before-trace";
    }
    return "?";
}

std::string_view name(StepsSource s) {
    switch (s) {
    case StepsSource::markers: return "markers";
    case StepsSource::optimizer_annotations: return "optimizer-annotations";
    case StepsSource::optimizer_frames: return "optimizer-frames";
    case StepsSource::inferred_period: return "inferred-period";
    case StepsSource::none: return "none";
    }
    return "?";
}

std::string_view name(LeakEvidence e) {
    switch (e) {
    case LeakEvidence::survivors: return "survivors";
    case LeakEvidence::replaced_bigger: return "replaced-bigger";
    case LeakEvidence::pool_in_use: return "pool-in-use";
    }
    return "?";
}

std::string_view name(LedgerPart p) {
    switch (p) {
    case LedgerPart::leak: return "leak";
    case LedgerPart::bounded_cache: return "bounded-cache";
    case LedgerPart::warm_up: return "warm-up";
    case LedgerPart::variation: return "variation";
    case LedgerPart::before_trace: return "before-trace";
    case LedgerPart::unexplained: return "unexplained";
    }
    return "?";
}

std::string_view name(Memory m) {
    switch (m) {
    case Memory::torch: return "torch";
    case Memory::external: return "external";
    case Memory::pinned: return "pinned";
    }
    return "?";
}

std::string_view name(Phase p) {
    switch (p) {
    case Phase::setup: return "setup";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    }
    return "?";
}

std::string_view name(PeakCategory c) {
    switch (c) {
    case PeakCategory::parameters: return "parameters";
    case PeakCategory::gradients: return "gradients";
    case PeakCategory::optimizer_state: return "optimizer-state";
    case PeakCategory::activations: return "activations";
    case PeakCategory::temporaries: return "temporaries";
    case PeakCategory::leaks: return "leaks";
    case PeakCategory::before_trace: return "before-trace";
    case PeakCategory::other: return "other";
    }
    return "?";
}

std::string_view describe(StepsSource s) {
    switch (s) {
    case StepsSource::markers: return "vramscope step markers";
    case StepsSource::optimizer_annotations: return "optimizer.step() annotations";
    case StepsSource::optimizer_frames: return "allocations inside torch.optim (optimizer frames in the stacks)";
    case StepsSource::inferred_period: return "the repeating allocation pattern";
    case StepsSource::none: return "nowhere: no step markers, optimizer annotations or repeating pattern";
    }
    return "?";
}

}  // namespace vramscope
