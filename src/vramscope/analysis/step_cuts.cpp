#include "analysis/step_cuts.h"

namespace vramscope {

void PlacedSteps::feed(Replay& r, const Event& e) {
    const size_t i = index_++;
    if (anchor_ && e.kind == EventKind::alloc && period_key(e) == *anchor_) {
        if (anchor_seen_) r.end_step();  // a step ends just before its successor starts
        anchor_seen_ = true;
        if (!r.wants_more()) return r.take(e);  // past the range: only checked
    }
    r.take(e);
    if (next_ < ends_.size() && ends_[next_] == i) {
        r.end_step();
        ++next_;
    }
}

bool GuessedSteps::chosen_optimizer_end(const Event& e) {
    if (e.kind != EventKind::annotation_end || annotations_.of(e.name) != AnnotationKinds::optimizer_step) return false;
    return first_.ends_step(e.name, e.device);
}

void GuessedSteps::end_at(Replay& r, size_t index) {
    ends_.push_back(index);
    r.end_step();
}

void GuessedSteps::release(Replay& r) {
    for (const Event& e : held_) r.take(e);  // past the range: only checked
    held_.clear();
    pending_.reset();
}

void GuessedSteps::feed_any(Replay& r, const Event& e) {
    const size_t i = index_++;
    if (pending_) {
        const bool zero_grad_end =
            e.kind == EventKind::annotation_end && annotations_.of(e.name) == AnnotationKinds::zero_grad;
        if (zero_grad_end) {  // the step ends with its gradients released
            release(r);
            r.take(e);
            end_at(r, i);
            return;
        }
        if (e.kind != EventKind::alloc && e.kind != EventKind::step && !chosen_optimizer_end(e)) {
            held_.push_back(e);
            return;
        }
        end_at(r, *pending_);
        release(r);
        if (!r.wants_more()) return r.take(e);  // past the range: only checked
    }
    r.take(e);
    if (e.kind == EventKind::step) {
        marker_seen_ = true;
        end_at(r, i);
    } else if (!marker_seen_ && chosen_optimizer_end(e)) {
        pending_ = i;
    }
}

void GuessedSteps::finish(Replay& r) {
    if (!pending_) return;
    end_at(r, *pending_);
    release(r);
}

}  // namespace vramscope
