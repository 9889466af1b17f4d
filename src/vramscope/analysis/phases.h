// Which phase of a training step the run is in, from the markers the trace holds. The one rule
// for the replay (each block's phase, the peak's) and for a capture, which writes the markers:
// - setup: before the trace's first marker (the model built and moved); a capture opens
//   `kFirstForwardAnnotation` as the run's first module call begins, so the first forward's
//   workspaces are not taken for parameters (a snapshot has no such marker);
// - backward: from the annotation `kBackwardAnnotation` opens (a capture writes it as
//   torch.autograd.backward is called) to the backward's end, the microbatch marker;
// - optimizer: from an optimizer step's start annotation (torch's record_function
//   "Optimizer.step#<Class>.step", in a snapshot; a capture writes the same from torch.optim's
//   pre-step hook) to the step's end, or to that annotation's end;
// - forward: everything else once a marker was seen: after a step's end or a backward's, until a
//   backward or an optimizer step begins (zero_grad and data loading fall here too).
// A trace without backward markers (a torch snapshot, an older capture) has its backwards
// inferred: the autograd engine allocates on its own thread, where no Python frame runs, so an
// allocation with no Python frame outside an optimizer step begins a backward, and the next one
// with Python frames ends it (`backward_inferred()`). Where neither holds, a backward cannot be
// told from the forward before it.
#pragma once
#include <cstdint>

#include "analysis/steps.h"
#include "events/event.h"
#include "findings/vocabulary.h"

namespace vramscope {

class PhaseClock {
public:
    explicit PhaseClock(const StackTable& names) : annotations_(names) {}
    // A marker or annotation; true when it began a new phase.
    bool see(const Event& e) {
        switch (e.kind) {
        case EventKind::microbatch: return begin(Phase::forward);
        case EventKind::annotation_start:
            switch (annotations_.of(e.name)) {
            case AnnotationKinds::backward: backward_marked_ = true; return begin(Phase::backward);
            case AnnotationKinds::optimizer_step: return begin(Phase::optimizer);
            case AnnotationKinds::first_forward: return now_ == Phase::setup && begin(Phase::forward);
            default: return false;
            }
        case EventKind::annotation_end:
            return annotations_.of(e.name) == AnnotationKinds::optimizer_step && now_ == Phase::optimizer && begin(Phase::forward);
        default: return false;
        }
    }
    // The replay ended a step here.
    bool step_ended() { return begin(Phase::forward); }
    // An allocation, made where no Python frame ran or not; true when it began a phase.
    bool allocated(bool no_python_frame) {
        if (backward_marked_ || now_ == Phase::optimizer) return false;
        if (no_python_frame && now_ != Phase::backward) return backward_inferred_ = true, begin(Phase::backward);
        if (!no_python_frame && now_ == Phase::backward) return begin(Phase::forward);
        return false;
    }
    Phase now() const { return now_; }
    // Phases begun so far: two blocks share a phase only if this did not change between them.
    uint64_t count() const { return count_; }
    bool backward_marked() const { return backward_marked_; }
    bool backward_inferred() const { return backward_inferred_ && !backward_marked_; }

private:
    bool begin(Phase p) {
        now_ = p;
        ++count_;
        return true;
    }
    AnnotationKinds annotations_;
    Phase now_ = Phase::setup;
    uint64_t count_ = 0;
    bool backward_marked_ = false;
    bool backward_inferred_ = false;
};

}  // namespace vramscope
