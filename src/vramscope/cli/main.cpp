// The core commands without Python (cli/options.h lists them), for benchmarks and fuzz reproduction.
#include "cli/cli.h"

int main(int argc, char** argv) { return vramscope::run_cli(std::vector<std::string>(argv + 1, argv + argc)); }
