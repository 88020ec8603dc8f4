#!/usr/bin/env bash
# GPU call 20 (2026-12-06, after run19.sh in the same call): the cold path read around the page
# cache in order (ReadAheadFile) against the restore through the cache and the raw ways, with
# one and two loaders and 4 and 8 MiB blocks. cold_restore_bench, 64 and 512 MiB, 5 rounds.
set -uo pipefail
out=${OUT:?}
mkdir -p /tmp/c
cmake --build --preset gpu -j 16 --target cold_restore_bench > /tmp/c/build.txt 2>&1 || { tail -30 /tmp/c/build.txt; }
for cfg in q1:SIESTA_BENCH_READ_AHEAD_IN_FLIGHT=1 q2:SIESTA_BENCH_READ_AHEAD_IN_FLIGHT=2 q1b8:SIESTA_BENCH_READ_AHEAD_IN_FLIGHT=1,SIESTA_BENCH_READ_AHEAD_BLOCK_KIB=8192; do
  mode=${cfg%%:*}
  env $(echo "${cfg#*:}" | tr ',' ' ') SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512 SIESTA_BENCH_ROUNDS=5 \
    timeout 120 build/gpu/bench/cold_restore_bench > /tmp/c/cold-$mode.txt 2>&1
  grep -E '^cold_restore' /tmp/c/cold-$mode.txt | while read -r line; do
    echo "$mode: $(echo "$line" | grep -oE '(size_mib:[0-9]+|restore_GBps|restore_through_cache_GBps|direct_q1_GBps|direct_q4_GBps|buffered_seq_GBps|best_raw_GBps|read_around_cache|cached_after_drop)=?[0-9.]*' | tr '\n' ' ')"
  done
done
tar -czf "$out/run20.tgz" -C /tmp c
