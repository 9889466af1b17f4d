#!/usr/bin/env bash
# Every test, from a fresh clone: C++ (GoogleTest through CTest), then Python (pytest) against
# the installed package. Installs what it needs first; CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's chromium drives the report's browser test (tests/python/test_report_browser.py).
# ISA-L, the fast inflater, is optional for a build; the tests read gzip with it and with zlib.
missing=()
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
[ -f /usr/include/isa-l/igzip_lib.h ] || missing+=(libisal-dev)
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then  # apt needs root: say what to install rather than die on its lock
    echo "scripts/test.sh: missing ${missing[*]}; install them first: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python3 -m pip install -q "nanobind>=2.0" "scikit-build-core>=0.10" "pytest>=7" ninja cmake playwright "mcp>=2.3,<3" \
  "mypy==2.4.1"
# torch for the capture tests, pinned: here it resolves to a CPU build (an unpinned one pulls
# several GB of CUDA).
python3 -m pip install -q "torch==2.13.0"
# The frameworks the training callbacks are tested with (tests/python/test_integrations*.py), pinned to
# the versions on the GPU machine; accelerate is what transformers' Trainer needs.
python3 -m pip install -q "transformers==5.17.0" "accelerate==1.15.0" "lightning==2.6.6"

cmake -S . -B build/tests -G Ninja -DVRAMSCOPE_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/tests
ctest --test-dir build/tests --output-on-failure

python3 -m pip install -q --no-build-isolation .
# The package against its native module's stub (python/vramscope/_core.pyi), strict; pyproject.toml's
# [tool.mypy] says what is read as Any.
python3 -m mypy
python3 -m pytest -q tests/python   # report screenshots land in build/artifacts/
