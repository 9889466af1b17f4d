// The core commands without Python (cli/options.h lists them), for benchmarks and fuzz reproduction.
#include <malloc.h>

#include "cli/cli.h"

int main(int argc, char** argv) {
    // A fixed mmap threshold (32 MiB, glibc's ceiling for its sliding one) turns the sliding one
    // off: with it, a run of 20,000 sites, whose series are grown and freed by the thousand after
    // the replay, spent 2-10 % more CPU in glibc (gen_trace 300 3000 20000 2; noisy), for 4 MB
    // less peak RSS. Here, not in the library: a process embedding it keeps its own settings.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    return vramscope::run_cli(std::vector<std::string>(argv + 1, argv + argc));
}
