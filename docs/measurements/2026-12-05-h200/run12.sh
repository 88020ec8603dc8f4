#!/usr/bin/env bash
# GPU call 12 (2026-12-05 evening): a traced 8 MiB restore. build/trace-src is this tree with
# timestamps at each step of SnapshotReader::read and the chunk reader (a probe, not kept in
# the tree); save_restore at 8 MiB with SIESTA_TRACE=1 at the defaults, on 4 read threads, and
# in 1 MiB chunks.
set -uo pipefail
out=${OUT:?}
mkdir -p /tmp/o
cd build/trace-src
cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 16 --target offload_throughput_bench > /tmp/o/build.txt 2>&1 || { tail -20 /tmp/o/build.txt; exit 1; }
mkdir -p /tmp/snaps
run() {  # name, env...
  local name=$1; shift
  env "$@" SIESTA_TRACE=1 SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=/tmp/snaps SIESTA_BENCH_SIZES_MIB=${SIZES:-8} \
    SIESTA_BENCH_USED_PCT=100 timeout 100 build/gpu/bench/offload_throughput_bench \
    --benchmark_filter=save_restore/cuda > /tmp/o/$name.txt 2>&1
  echo "$name: $(grep -E '^save_restore' /tmp/o/$name.txt | grep -oE '(session_mib|restore_gb_s|restore_ratio|restore_baseline_gb_s)=[0-9.]+' | tr '\n' ' ')"
  rm -rf /tmp/snaps/*
}
run default X=1
run threads4 SIESTA_BENCH_THREADS=4
run chunk1 SIESTA_BENCH_CHUNK_MIB=1
run threads1 SIESTA_BENCH_THREADS=1
run default2 X=2
tar -czf "$out/run12.tgz" -C /tmp o
