#!/usr/bin/env bash
# Rank traces analysed side by side: one trace against N copies of it in one `analyze` (as a run's
# ranks are), fresh processes interleaved. The figure is the wall time of N against one's:
#   bash bench/ranks_parallel.sh [RANKS] [STEPS]     (defaults: the machine's cores; 20000 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-$(nproc)}
steps=${2:-20000}
cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench --target gen_trace vramscope-core >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build/bench/gen_trace "$out/run.rank0.vscope" "$steps" 400 64 0 >/dev/null
for r in $(seq 1 $((ranks - 1))); do ln -s "$out/run.rank0.vscope" "$out/run.rank$r.vscope"; done
echo "## machine: $(nproc) cores; $ranks ranks of $steps steps x 400 events; commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
python3 bench/side_by_side.py --runs 5 "one=build/bench/vramscope-core analyze $out/run.rank0.vscope" \
  "$ranks ranks=build/bench/vramscope-core analyze $(ls "$out"/run.rank*.vscope | tr '\n' ' ')"
