#!/usr/bin/env bash
# GPU call 11 (2026-12-05 evening): a small restore's wait for its threads. The machine's
# wake-up latency of a blocked thread (build/probe/wake.cc: one waiter and twelve, after 0.2,
# 2 and 20 ms asleep), then save_restore at 8, 32, 256 and 1024 MiB on the base (1ba736c,
# carried as build/bench-base) and this tree (the restoring thread reads chunks the pool has
# not come for yet, and polls the oldest before it blocks), alternating, three rounds, with
# the Offloader's per-restore log lines.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; } > "$out/machine.txt"
cat "$out/machine.txt"
mkdir -p /tmp/o
g++ -O2 -std=c++20 -pthread build/probe/wake.cc -o build/probe/wake && build/probe/wake | tee /tmp/o/wake.txt
(cd build/bench-base && cmake --preset gpu -B build/gpu > /dev/null 2>&1 &&
  cmake --build build/gpu -j 8 --target offload_throughput_bench > /tmp/o/build-base.txt 2>&1) &
cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 8 --target offload_throughput_bench > /tmp/o/build-new.txt 2>&1
wait
echo "builds: $(elapsed) s"; tail -1 /tmp/o/build-base.txt /tmp/o/build-new.txt
mkdir -p build/snaps
for round in 1 2 3; do
  for side in new base; do
    bin=build/gpu/bench/offload_throughput_bench
    [ $side = base ] && bin=build/bench-base/build/gpu/bench/offload_throughput_bench
    f=/tmp/o/$side-r$round.txt
    SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps \
      SIESTA_BENCH_SIZES_MIB=${SIZES:-8,32,256,1024} SIESTA_BENCH_USED_PCT=100 timeout 150 $bin \
      --benchmark_filter=save_restore/cuda > $f 2>&1
    echo "$side round $round ($(elapsed) s):"
    grep -E '^save_restore' $f | while read -r line; do
      echo "  $(echo "$line" | grep -oE '(session_mib|restore_gb_s|restore_ratio|restore_parallel_ratio|save_ratio)=[0-9.]+' | tr '\n' ' ')"
    done
    rm -rf build/snaps/*
  done
done
tar -czf "$out/run11.tgz" -C /tmp o
echo "done: $(elapsed) s"
