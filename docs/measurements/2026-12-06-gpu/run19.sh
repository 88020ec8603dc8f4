#!/usr/bin/env bash
# GPU call 19 (written 2026-12-06, not yet run: no device time was left): when should the restoring thread run chunks itself? The tree at
# 5a76904 with help-probe.patch.txt (PROBE_HELP: 0 as committed, it runs queued chunks whenever
# the pool has not taken them; 3 only once every chunk is submitted, or when chunks are at most
# 512 KiB; PROBE_RUN_MIB: a staging run's bytes, 2 as committed; PROBE_SLOTS: chunks in flight,
# at least), save_restore at 8, 32 and 256 MiB, three rounds alternating; then the RAM
# tier's copies against the link (ram_tier_copy_bench, 256 MiB and 1 GiB).
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
mkdir -p /tmp/o build/snaps
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|L3|Flags' | cut -c1-200; uname -r; } > /tmp/o/machine.txt
head -3 /tmp/o/machine.txt
finish() { tar -czf "$out/run19.tgz" -C /tmp o; echo "done: $(elapsed) s"; }
cmake --preset gpu > /tmp/o/configure.txt 2>&1 &&
  cmake --build --preset gpu -j 16 --target offload_throughput_bench ram_tier_copy_bench > /tmp/o/build.txt 2>&1 || { tail -30 /tmp/o/build.txt; finish; exit 1; }
echo "build: $(elapsed) s"
for round in 1 2 3; do
  for cfg in help0:PROBE_HELP=0 help3:PROBE_HELP=3 help3run16:PROBE_HELP=3,PROBE_RUN_MIB=16,PROBE_SLOTS=32; do
    [ "$(elapsed)" -gt 150 ] && break 2  # the session's device time is short: keep what ran
    mode=${cfg%%:*}
    f=/tmp/o/$mode-r$round.txt
    env $(echo "${cfg#*:}" | tr ',' ' ') SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8,32,256 \
      SIESTA_BENCH_USED_PCT=100 timeout 30 build/gpu/bench/offload_throughput_bench --benchmark_filter=save_restore/cuda > $f 2>&1
    grep -E '^save_restore' $f | while read -r line; do
      echo "$mode r$round: $(echo "$line" | grep -oE '(session_mib|restore_gb_s|restore_ratio|restore_parallel_ratio)=[0-9.]+' | tr '\n' ' ')"
    done
    rm -rf build/snaps/*
  done
  echo "round $round: $(elapsed) s"
done
SIESTA_BENCH_RAM_SIZES_MIB=256,1024 timeout 30 build/gpu/bench/ram_tier_copy_bench --benchmark_filter='cuda/pool' > /tmp/o/ram_tier_copy.txt 2>&1
echo "ram_tier_copy rc $?: $(grep -E '^ram_tier' /tmp/o/ram_tier_copy.txt | grep -oE '(save_vs_link|restore_vs_link|restore_ms|link_in_ms)=[0-9.]+' | paste -sd' ')"
finish
