#!/usr/bin/env bash
# GPU call 9 (2026-12-05): bench-compare of this tree against dd7ad5c (before the read
# threads, the 16 x 16 MiB ring, reads into their destination and the cut chunks), prepared on
# the CPU machine with `scripts/bench-compare --prepare dd7ad5c` and carried as
# build/bench-base. The machine has no scipy: the U tests run on the CPU machine with
# `scripts/bench-compare --compare DIR`.
set -uo pipefail
out=${OUT:?}
mkdir -p /tmp/snaps
SIESTA_COMPARE_ROUNDS=3 SIESTA_BENCH_DIR=/tmp/snaps OUT="$out/compare" \
  timeout 560 scripts/bench-compare build/bench-base 'ttft|save_restore' > "$out/compare-log.txt" 2>&1
echo "bench-compare rc $?"; grep -E "^====|^---- round" "$out/compare-log.txt" | tail -4
rm -f "$out"/compare/*.log.big 2>/dev/null; true
