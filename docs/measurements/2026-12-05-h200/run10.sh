#!/usr/bin/env bash
# GPU call 10 (2026-12-05): where a small restore's time goes. The fresh-page cost of this
# machine (build/probe/pf.cc: touching fresh anonymous memory page by page, on 1 and 8
# threads, with MADV_POPULATE_WRITE, with huge pages), then save_restore at 8 and 32 MiB with
# the synthetic session's 1 MiB host region and with none, on the base (df22673, carried as
# build/bench-base) and this tree (the host pages made present ahead of the read), alternating.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; cat /sys/kernel/mm/transparent_hugepage/enabled; } > "$out/machine.txt"
cat "$out/machine.txt"
g++ -O2 -std=c++20 -pthread build/probe/pf.cc -o build/probe/pf && { build/probe/pf 64; build/probe/pf 1; } > "$out/fresh_pages.txt" 2>&1
grep -E "rep|ms/MiB" "$out/fresh_pages.txt" | awk 'NR%3==0'
(cd build/bench-base && cmake --preset gpu -B build/gpu > /dev/null 2>&1 &&
  cmake --build build/gpu -j 16 --target offload_throughput_bench > "$out/build-base.txt" 2>&1) &
cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 16 --target offload_throughput_bench > "$out/build-new.txt" 2>&1
wait
echo "builds: $(elapsed) s"
mkdir -p build/snaps /tmp/o
for round in 1 2; do
  for side in base new; do
    bin=build/gpu/bench/offload_throughput_bench
    [ $side = base ] && bin=build/bench-base/build/gpu/bench/offload_throughput_bench
    for host in 1024 0; do
      f=/tmp/o/$side-host$host-r$round.txt
      SIESTA_BENCH_LOG=1 SIESTA_BENCH_HOST_KIB=$host SIESTA_BENCH_DIR=$PWD/build/snaps \
        SIESTA_BENCH_SIZES_MIB=8,32 SIESTA_BENCH_USED_PCT=100 timeout 60 $bin \
        --benchmark_filter=save_restore/cuda > $f 2>&1
      echo "$side host $host round $round: $(grep -E '^save_restore' $f | grep -oE '(session_mib|restore_gb_s|restore_ratio|restore_baseline_gb_s)=[0-9.]+' | tr '\n' ' ')"
      rm -rf build/snaps/*
    done
  done
done
tar -czf "$out/small.tgz" -C /tmp o
echo "done: $(elapsed) s"
