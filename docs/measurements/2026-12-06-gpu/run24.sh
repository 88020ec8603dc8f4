#!/usr/bin/env bash
# GPU call 24 (2026-12-06): the final tree (two loaders for cold files) on whatever card is
# lent: restores from the page cache at 8 / 256 / 1024 MiB (two runs), then the cold bench with
# one loader as a way of the same rounds. Each step guarded by the time spent.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
cmake --preset gpu > /dev/null 2>&1
cmake --build --preset gpu -j 16 --target offload_throughput_bench cold_restore_bench 2>&1 | tail -1
echo "built at $(elapsed) s"; nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep L3
for i in 1 2; do
  [ "$(elapsed)" -lt 150 ] || break
  SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_SIZES_MIB=8,256,1024 SIESTA_BENCH_USED_PCT=100 \
    timeout 60 build/gpu/bench/offload_throughput_bench --benchmark_filter='save_restore/cuda' \
    > "$out/sizes-$i.txt" 2>&1
  grep -E "^save_restore" "$out/sizes-$i.txt" | grep -oE "session_mib:[0-9]+|restore_gb_s=[0-9.]+|restore_ratio=[0-9.]+|restore_parallel_baseline_gb_s=[0-9.]+|restore_parallel_ratio=[0-9.]+" | paste -sd' ' | sed "s/^/r$i /"
done
if [ "$(elapsed)" -lt 170 ]; then
  SIESTA_BENCH_READ_AHEAD_LOADERS=1 SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512 \
    SIESTA_BENCH_ROUNDS=5 timeout 90 build/gpu/bench/cold_restore_bench > "$out/cold.txt" 2>&1
  grep -E '^cold_restore' "$out/cold.txt" | grep -oE '(size_mib:[0-9]+|restore_GBps|restore_loaders_1_GBps|restore_through_cache_GBps|best_raw_GBps|restore_vs_best)=?[0-9.]*' | paste -sd' '
fi
echo "done at $(elapsed) s"
