#!/usr/bin/env bash
# The core's figures in one run (docs/benchmarks.md: import, analysis, .vscope size):
#   bash bench/run.sh [SNAPSHOT]
# SNAPSHOT: a torch memory snapshot. The recorded one (bench/record_big_snapshot.py, on a GPU:
# bench/out/big_snapshot.pickle.gz) when it is there; else a synthetic one of 1 M entries that
# bench/make_snapshot.py writes to bench/out/synthetic_1m.pickle.gz on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot=${1:-bench/out/big_snapshot.pickle.gz}
if [ $# -eq 0 ] && [ ! -f "$snapshot" ]; then
  snapshot=bench/out/synthetic_1m.pickle.gz
  mkdir -p bench/out
  [ -f "$snapshot" ] || python3 bench/make_snapshot.py "$snapshot" --entries 1000000 --gzip
fi
cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/bench --target bench_core gen_trace live_step_end vramscope-core >/dev/null
echo "## machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); input $snapshot; commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
echo
echo "## stages, in one process (best of 5)"
build/bench/bench_core "$snapshot" 5
echo
echo "## against Python's pickle.load, fresh processes, interleaved"
python3 bench/compare_import.py "$snapshot" --runs 5 --core build/bench/vramscope-core
echo
echo "## .vscope size on the recorded fixtures"
echo "| fixture | events | gzip'd torch pickle, bytes/event | .vscope, bytes/event |"
echo "|---|---|---|---|"
for f in tests/data/*.pickle.gz; do
  out=$(mktemp --suffix=.vscope)
  events=$(build/bench/vramscope-core convert "$f" "$out" | sed -E 's/.*: ([0-9,]+) events/\1/; s/,//g')
  awk -v n="$(basename "$f")" -v e="$events" -v g="$(stat -c %s "$f")" -v v="$(stat -c %s "$out")" \
    'BEGIN { printf "| %s | %d | %.2f | %.2f |\n", n, e, g / e, v / e }'
  rm -f "$out"
done
