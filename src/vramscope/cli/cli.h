// The command line, whole: the Python entry point and the standalone binary both call this.
#pragma once
#include <string>
#include <vector>

namespace vramscope {

// args excludes the program name. Returns the process exit code: 0 ok, 1 leak under
// --fail-on-leak, 2 usage or input error.
int run_cli(const std::vector<std::string>& args);

}  // namespace vramscope
