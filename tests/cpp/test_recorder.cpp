// The recorder's order: a step end is queued by the thread that ends the step, and the drain puts
// it after exactly the events numbered before it, whichever thread's queue they sit in and however
// close their times.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <ostream>
#include <thread>
#include <vector>

#include "capture/recorder.h"
#include "events/sink.h"
#include "trace/reader.h"
#include "temp_trace.h"

using namespace vramscope;
using namespace vramscope::capture;

using vramscope::testing::temp_trace;

namespace {

// Another thread that runs what it is given, one call at a time, and keeps its thread-local
// state between calls (as torch's autograd thread does for the hook).
class OtherThread {
public:
    OtherThread() : thread_([this] { loop(); }) {}
    ~OtherThread() {
        run(nullptr);
        thread_.join();
    }
    void run(std::function<void()> f) {  // returns once `f` has run there
        std::unique_lock lock(mutex_);
        job_ = std::move(f), pending_ = true;
        wake_.notify_all();
        wake_.wait(lock, [&] { return !pending_; });
    }

private:
    void loop() {
        for (;;) {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return pending_; });
            const bool last = !job_;
            if (job_) job_();
            pending_ = false;
            wake_.notify_all();
            if (last) return;
        }
    }
    std::mutex mutex_;
    std::condition_variable wake_;
    std::function<void()> job_;
    bool pending_ = false;
    std::thread thread_;
};

struct Seen {
    EventKind kind;
    uint8_t device;
    uint64_t addr;
    bool operator==(const Seen&) const = default;
    friend void PrintTo(const Seen& s, std::ostream* os) {
        *os << event_kind_name(s.kind) << " cuda:" << int(s.device) << " 0x" << std::hex << s.addr << std::dec;
    }
};

std::vector<Seen> recorded(const std::string& path) {
    std::vector<Seen> out;
    for (const Event& e : read_trace(path).events) out.push_back(Seen{e.kind, e.device, e.addr});
    std::filesystem::remove(path);
    return out;
}

}  // namespace

TEST(Recorder, AStepEndComesAfterWhatWasNumberedBeforeItOnEveryThreadAndBeforeTheRest) {
    const std::string path = temp_trace("order");
    {
        Recorder r(path);
        OtherThread autograd;
        const auto alloc = [&](uint8_t device, uint64_t addr) {
            r.allocator_event(EventKind::alloc, device, addr, 512, 0, nullptr);
        };
        autograd.run([&] { alloc(0, 0x1000); });
        alloc(0, 0x2000);
        autograd.run([&] { r.allocator_event(EventKind::free_requested, 0, 0x1000, 512, 0, nullptr); });
        r.end_step("optimizer step");  // the free request waits in its lane: it is not before the step end
        autograd.run([&] {
            r.allocator_event(EventKind::free_completed, 0, 0x1000, 512, 0, nullptr);
            alloc(1, 0x5000);  // a device first met after the step end
        });
        alloc(0, 0x3000);
        r.marker(EventKind::microbatch, "backward");
        autograd.run([&] { alloc(0, 0x4000); });
        r.close();
    }
    const std::vector<Seen> expected = {
        {EventKind::alloc, 0, 0x1000}, {EventKind::alloc, 0, 0x2000}, {EventKind::step, 0, 0},
        {EventKind::free, 0, 0x1000},  {EventKind::alloc, 1, 0x5000}, {EventKind::alloc, 0, 0x3000},
        {EventKind::microbatch, 0, 0}, {EventKind::alloc, 0, 0x4000}};
    EXPECT_EQ(recorded(path), expected);
}

TEST(Recorder, MarkersFromOneThreadKeepItsOrderWhileTheWorkerDrainsBetweenThem) {
    const std::string path = temp_trace("steps");
    constexpr int kSteps = 300;
    {
        Recorder r(path);
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < 50; ++k)
                r.allocator_event(EventKind::alloc, 0, 0x1000 + 512 * uint64_t(s * 50 + k), 512, 0, nullptr);
            r.end_step("optimizer step");
            if (s % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // a drain or two meanwhile
        }
        EXPECT_EQ(r.steps(), uint64_t(kSteps));
        r.close();
    }
    const std::vector<Seen> seen = recorded(path);
    ASSERT_EQ(seen.size(), size_t(kSteps * 51));
    for (size_t i = 0; i < seen.size(); ++i) {
        if (i % 51 == 50) ASSERT_EQ(seen[i].kind, EventKind::step) << "at " << i;
        else ASSERT_EQ(seen[i].addr, 0x1000 + 512 * (i - i / 51)) << "at " << i;
    }
}

namespace {
struct StepCounter : EventSink {
    std::atomic<int> steps{0};
    void device(uint8_t, uint64_t, uint64_t) override {}
    void stack(uint32_t, std::span<const SinkFrame>) override {}
    void events(std::span<const Event> events) override {
        for (const Event& e : events) steps += e.kind == EventKind::step;
    }
};
}  // namespace

TEST(Recorder, AStepEndDoesNotWaitForAFreeRequestAnotherThreadLeftWaiting) {
    // The autograd thread's last call was a free request: its completion comes only with that
    // device's next call, maybe a step later. The step end is drained without it.
    const std::string path = temp_trace("waiting");
    StepCounter sink;
    {
        Recorder r(path);
        r.add_sink(&sink);
        OtherThread autograd;
        autograd.run([&] {
            r.allocator_event(EventKind::alloc, 0, 0x1000, 512, 0, nullptr);
            r.allocator_event(EventKind::free_requested, 0, 0x1000, 512, 0, nullptr);
        });
        r.end_step("optimizer step");
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (sink.steps == 0 && std::chrono::steady_clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the worker's drain
        EXPECT_EQ(sink.steps, 1) << "the step end waited for the device's next call";
        r.close();
    }
    std::filesystem::remove(path);
}
