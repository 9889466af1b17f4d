// What the live monitor's step end costs (analysis/live_monitor.h): the capture's recorder calls it
// on the training thread when a step marker is drained, so it is paid every step. A training-like
// run is fed to it: SITES allocation sites, PERSISTENT blocks held throughout (parameters,
// optimizer state), TRANSIENT blocks a step allocated and freed within it (activations), and a
// gradient block for every fourth site held across the step end and freed after it (zero_grad
// follows optimizer.step()); one site leaks a block a step. Prints the median and 90th percentile of
// end_step() over the steps after warm-up.
//   cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release
//   cmake --build build/release --target live_step_end && build/release/live_step_end [SITES] [STEPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "analysis/live_monitor.h"

int main(int argc, char** argv) {
    using namespace vramscope;
    const uint32_t sites = argc > 1 ? uint32_t(std::atoi(argv[1])) : 300;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 400;
    const uint32_t persistent = 400, transient = 1638;
    LiveMonitor monitor;
    monitor.set_capacity(0, 80ull << 30);
    uint64_t next = 0x7f0000000000;
    for (uint32_t i = 0; i < persistent; ++i, next += 1 << 22) monitor.alloc(0, next, 1 << 22, 1 + i % sites);
    std::vector<double> spent;
    size_t said = 0;
    for (int step = 0; step < steps; ++step) {
        const uint64_t base = next + (uint64_t(step % 2) << 36);
        for (uint32_t i = 0; i < transient; ++i) monitor.alloc(0, base + i * 65536, 65536, 1 + (i * 7) % sites);
        for (uint32_t i = 0; i < transient; ++i) monitor.release(0, base + i * 65536);
        const uint64_t grads = base + (1ull << 34);
        for (uint32_t s = 0; s < sites; s += 4) monitor.alloc(0, grads + s * 4096, 4096, 1 + s);
        monitor.alloc(0, next + (1ull << 40) + uint64_t(step) * 4096, 4096, 1);  // the leak
        const auto t0 = std::chrono::steady_clock::now();
        said += monitor.end_step().size();
        spent.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        for (uint32_t s = 0; s < sites; s += 4) monitor.release(0, grads + s * 4096);
    }
    std::vector<double> timed(spent.begin() + std::min<size_t>(spent.size(), 20), spent.end());
    std::sort(timed.begin(), timed.end());
    std::printf("sites %u: end_step median %.1f us, p90 %.1f us over %zu steps (%zu said)\n", sites, timed[timed.size() / 2],
                timed[timed.size() * 9 / 10], timed.size(), said);
}
