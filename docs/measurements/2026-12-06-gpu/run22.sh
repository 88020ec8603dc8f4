#!/usr/bin/env bash
# GPU call 22 (2026-12-06): run21 again with the cold probe cut from 8 MiB to 1 MiB of the
# first chunks (run21's bench-compare: 64 MiB restores 0.856 × ce1d070, its own baselines
# 0.78 ×), 3 rounds (the budget left); then the gpu tests (run21 forgot to configure build/gpu) and the cold
# bench at the defaults.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
mkdir -p /tmp/r/compare /tmp/snaps
SIESTA_COMPARE_ROUNDS=3 SIESTA_BENCH_DIR=/tmp/snaps OUT=/tmp/r/compare \
  timeout 200 scripts/bench-compare build/bench-base 'save_restore' > /tmp/r/compare-log.txt 2>&1
echo "bench-compare rc $? at $(( $(date +%s) - start )) s"; grep -E "restore_gb_s|restore_ratio|save_ratio" /tmp/r/compare-log.txt | head -8
tar -czf "$out/run22-compare.tgz" -C /tmp r  # kept if the call's time runs out below
[ $(( $(date +%s) - start )) -lt 160 ] && { { cmake --preset gpu > /tmp/r/configure.txt 2>&1 && cmake --build --preset gpu -j 16 --target gpu_tests cold_restore_bench > /tmp/r/build.txt 2>&1; } || tail -20 /tmp/r/build.txt; }
echo "built at $(( $(date +%s) - start )) s"
[ -x build/gpu/tests/gpu_tests ] && timeout 70 build/gpu/tests/gpu_tests --gtest_brief=1 > /tmp/r/gpu_tests.txt 2>&1
echo "gpu_tests rc $? at $(( $(date +%s) - start )) s"; tail -3 /tmp/r/gpu_tests.txt
[ $(( $(date +%s) - start )) -lt 210 ] && SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512 SIESTA_BENCH_ROUNDS=3 \
  timeout 60 build/gpu/bench/cold_restore_bench > /tmp/r/cold.txt 2>&1
grep -E '^cold_restore' /tmp/r/cold.txt | grep -oE '(size_mib:[0-9]+|restore_GBps|restore_through_cache_GBps|direct_q1_GBps|buffered_seq_GBps|best_raw_GBps|restore_vs_best|read_around_cache)=?[0-9.]*' | paste -sd' '
rm -rf /tmp/snaps
tar -czf "$out/run22.tgz" -C /tmp r
echo "done: $(( $(date +%s) - start )) s"
