#!/usr/bin/env bash
# GPU call 14 (2026-12-05 evening): run13's traced part again (its probe had not been applied):
# this tree with the step probe (build/trace-src, not kept), save_restore at 8 MiB, at the
# defaults, in 1 MiB chunks and without a host region; then 4 read threads and 32 MiB.
set -uo pipefail
out=${OUT:?}
mkdir -p /tmp/o build/snaps
(cd build/trace-src && cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 16 --target offload_throughput_bench > /tmp/o/build-trace.txt 2>&1) || { tail /tmp/o/build-trace.txt; exit 1; }
for cfg in default:X=1 chunk1:SIESTA_BENCH_CHUNK_MIB=1 host0:SIESTA_BENCH_HOST_KIB=0 threads4:SIESTA_BENCH_THREADS=4 mib32:SIESTA_BENCH_SIZES_MIB=32; do
  name=${cfg%%:*}
  env SIESTA_BENCH_SIZES_MIB=8 ${cfg#*:} SIESTA_TRACE=1 SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps \
    SIESTA_BENCH_USED_PCT=100 timeout 100 build/trace-src/build/gpu/bench/offload_throughput_bench \
    --benchmark_filter=save_restore/cuda > /tmp/o/trace-$name.txt 2>&1
  echo "trace $name: $(grep -E '^save_restore' /tmp/o/trace-$name.txt | grep -oE '(restore_gb_s|restore_ratio)=[0-9.]+' | tr '\n' ' ') traces $(grep -c TRACE /tmp/o/trace-$name.txt)"
  rm -rf build/snaps/*
done
tar -czf "$out/run14.tgz" -C /tmp o
