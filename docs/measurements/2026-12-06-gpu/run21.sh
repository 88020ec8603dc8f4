#!/usr/bin/env bash
# GPU call 21 (2026-12-06): the cold path's change (a cached_bytes probe before every disk
# restore; cold files read around the page cache) against ce1d070, on the restore path itself
# (bench-compare save_restore, 3 rounds; base prepared with `scripts/bench-compare --prepare
# ce1d070` and carried as build/bench-base), then the gpu tests and the cold bench once more
# at its defaults.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
mkdir -p /tmp/r/compare /tmp/snaps
SIESTA_COMPARE_ROUNDS=3 SIESTA_BENCH_DIR=/tmp/snaps OUT=/tmp/r/compare \
  timeout 330 scripts/bench-compare build/bench-base 'save_restore' > /tmp/r/compare-log.txt 2>&1
echo "bench-compare rc $? at $(( $(date +%s) - start )) s"; grep -A12 "^====" /tmp/r/compare-log.txt | head -30
cmake --build --preset gpu -j 16 --target gpu_tests cold_restore_bench > /tmp/r/build.txt 2>&1 || tail -20 /tmp/r/build.txt
timeout 100 build/gpu/tests/gpu_tests --gtest_brief=1 > /tmp/r/gpu_tests.txt 2>&1
echo "gpu_tests rc $? at $(( $(date +%s) - start )) s"; tail -3 /tmp/r/gpu_tests.txt
SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512 SIESTA_BENCH_ROUNDS=5 \
  timeout 80 build/gpu/bench/cold_restore_bench > /tmp/r/cold.txt 2>&1
grep -E '^cold_restore' /tmp/r/cold.txt | grep -oE '(size_mib:[0-9]+|restore_GBps|restore_through_cache_GBps|direct_q1_GBps|buffered_seq_GBps|best_raw_GBps|restore_vs_best|read_around_cache)=?[0-9.]*' | paste -sd' '
rm -rf /tmp/snaps
tar -czf "$out/run21.tgz" -C /tmp r
echo "done: $(( $(date +%s) - start )) s"
