#!/usr/bin/env bash
# The many-sites figures of docs/benchmarks.md: this tree's analysis against an older tree's (BASE,
# from `git archive REV | tar -x -C BASE`), in fresh processes taking turns (bench/side_by_side.py),
# on gen_trace runs of 100,000 steps (2,000 sites keeping blocks 2 steps; 64 sites keeping none, the
# cost of the same events with nothing to write down) and of 1.5 M steps over 20,000 sites.
#   bash bench/series_side_by_side.sh BASE [RUNS]
set -euo pipefail
base=$(cd "$1" && pwd)
runs=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
for tree in "$here" "$base"; do
  cmake -S "$tree" -B "$tree/build/bench" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$tree/build/bench" --target vramscope-core gen_trace >/dev/null
done
out=$here/bench/out
mkdir -p "$out"
gen=$here/build/bench/gen_trace
[ -f "$out/sites64.vscope" ] || "$gen" "$out/sites64.vscope" 100000 400 64 0
[ -f "$out/sites2000.vscope" ] || "$gen" "$out/sites2000.vscope" 100000 400 2000 2
[ -f "$out/sites20k.vscope" ] || "$gen" "$out/sites20k.vscope" 1500000 8 20000 2
after=$here/build/bench/vramscope-core
before=$base/build/bench/vramscope-core
python3 "$here/bench/side_by_side.py" --runs "$runs" \
  "after-64-sites=$after analyze $out/sites64.vscope" "after-2000-sites=$after analyze $out/sites2000.vscope" \
  "before-64-sites=$before analyze $out/sites64.vscope" "before-2000-sites=$before analyze $out/sites2000.vscope"
# The older tree takes minutes here (a value per site per step): this tree alone.
python3 "$here/bench/side_by_side.py" --runs "$runs" "after-20k-sites-1.5m-steps=$after analyze $out/sites20k.vscope"
