#!/usr/bin/env bash
# Capture overhead of this checkout against an older tree, side by side on a GPU machine: each
# tree built into a folder of its own (kept in .bench-trees/ between calls), the allocator hook
# compiled once, then bench/recorder_cost.py for each, then bench/capture_overhead.py --alternate
# in fresh processes, the trees taking turns, and each tree's processes pooled.
#   bash bench/capture_side_by_side.sh OLD_SOURCE OUT [ROUNDS] [CYCLES] [OLD_EVERY] [COST_PAIRS] [VARIANTS]
# OLD_SOURCE: the older tree's source folder (git archive REV | tar -x -C DIR). A round runs this
# tree once and, every OLD_EVERY-th round (default 1), the old one; recorder_cost.py runs COST_PAIRS
# times per tree and cache state (default 2), trees alternating; VARIANTS, quoted, names the
# variants each process alternates (default: all; "none vramscope" makes a cycle two steps).
# Results: OUT/{new,old}-N.json, OUT/pooled-{new,old}.json, OUT/recorder_cost.txt.
# The builds and the compiled allocator hook both stay in .bench-trees/, so a second call spends its
# time on rounds, not on building; rounds already in OUT are kept and counted.
set -euo pipefail
cd "$(dirname "$0")/.."
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.bench-trees/torch_extensions}"
old_source=$1 out=$2 rounds=${3:-3} cycles=${4:-200} old_every=${5:-1} cost_pairs=${6:-2} variants=(${7:-})
mkdir -p "$out" .bench-trees
build() {  # TREE SOURCE
  [ -d ".bench-trees/$1/vramscope" ] && return
  python3 -m pip install -q --no-build-isolation --no-deps --target ".bench-trees/$1" "$2" >"$out/build-$1.log" 2>&1
}
build old "$old_source" & build new . & wait
for tree in new old; do  # each tree's processes must import that tree's vramscope, or the two compare one
  # (seen on the GPU host: a vramscope installed in site-packages won over PYTHONPATH for both trees)
  (cd bench && PYTHONPATH=../.bench-trees/$tree python3 -c "
import os, sys, vramscope
print('$tree:', vramscope.__file__)
sys.exit(0 if os.path.realpath(vramscope.__file__).startswith(os.path.realpath('../.bench-trees/$tree') + os.sep) else 1)") \
    || { echo "the $tree tree's processes import another vramscope (pip uninstall -y vramscope first)"; exit 1; }
done
for tree in new old; do  # compile (or find) the allocator hook, and the C pump, before timing
  PYTHONPATH=.bench-trees/$tree python3 -c "import torch; torch.cuda.init(); from vramscope.capture.hook import load_allocator_hook as l; l()" >/dev/null 2>&1 || true
done
for evict in 0 4096; do  # caches warm, then 4 MiB written between allocations (cold, as in training)
  for ((p = 0; p < cost_pairs; ++p)); do for tree in new old; do
    echo "$tree, evict $evict KiB: $(PYTHONPATH=.bench-trees/$tree python3 bench/recorder_cost.py --pairs 1000000 --repeats 7 --evict-kib $evict)"
  done; done
done | tee -a "$out/recorder_cost.txt"
first=$(find "$out" -name 'new-*.json' | wc -l)
for ((r = first; r < first + rounds; ++r)); do
  if ((r % old_every)); then trees=(new); elif ((r % 2)); then trees=(old new); else trees=(new old); fi
  for tree in "${trees[@]}"; do
    PYTHONPATH=.bench-trees/$tree timeout 300 python3 bench/capture_overhead.py --alternate "$cycles" 20 \
      --workloads transformer ${variants[@]:+--variants "${variants[@]}"} --out "$out/$tree-$r.json" >"$out/$tree-$r.log" 2>&1 || echo "$tree round $r failed"
    echo "$tree round $r: $(tail -n 4 "$out/$tree-$r.log" | tr '\n' ' ')"
  done
done
for tree in new old; do
  [ -n "$(find "$out" -name "$tree-*.json")" ] || continue
  echo "== $tree, pooled"
  python3 bench/capture_overhead.py --pool "$out"/$tree-*.json | tee "$out/pooled-$tree.txt"
done
