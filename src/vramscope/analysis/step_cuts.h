// Where the replay ends each step, two ways. PlacedSteps: where a StepFinder placed them (a trace
// in memory, or a file read a second time). GuessedSteps: decided as the events pass, for a file
// read once: at our step markers, else after each step of the first optimizer seen (with the
// zero_grad() right after it), the two sources StepFinder prefers; a StepFinder beside it says
// afterwards whether the guess was its answer (same ends), else the file is read again, placed.
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "analysis/replay.h"
#include "analysis/steps.h"

namespace vramscope {

class PlacedSteps {
public:
    explicit PlacedSteps(const Steps& s) : ends_(s.ends), anchor_(s.period_anchor) {}
    void feed(Replay& r, const Event& e);

private:
    std::vector<size_t> ends_;
    std::optional<uint64_t> anchor_;
    size_t index_ = 0, next_ = 0;
    bool anchor_seen_ = false;
};

class GuessedSteps {
public:
    explicit GuessedSteps(const StackTable& names) : annotations_(names) {}
    // Inline: most events are neither markers nor annotations, and no step end is pending.
    void feed(Replay& r, const Event& e) {
        if (pending_ || e.kind == EventKind::step || e.kind == EventKind::annotation_end) return feed_any(r, e);
        ++index_;
        r.take(e);
    }
    // A step end still waiting for its zero_grad() ends where the optimizer step did.
    void finish(Replay& r);
    // Where it ended steps (event indices, as Steps::ends).
    const std::vector<size_t>& ends() const { return ends_; }

private:
    void feed_any(Replay& r, const Event& e);
    bool chosen_optimizer_end(const Event& e);
    void end_at(Replay& r, size_t index);
    void release(Replay& r);  // the events held while a step end was pending

    AnnotationKinds annotations_;
    std::vector<size_t> ends_;
    size_t index_ = 0;
    bool marker_seen_ = false;
    FirstOptimizer first_;
    // The end of an optimizer step, until an allocation (it ends there), a zero_grad() end (the
    // step ends after it) or the next optimizer step's end says which; the events between wait.
    std::optional<size_t> pending_;
    std::vector<Event> held_;
};

}  // namespace vramscope
