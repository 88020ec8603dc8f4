#!/usr/bin/env bash
# GPU call 7 (2026-12-05), run6.sh cut to what a short lease allows: save_restore at the
# defaults (reads on three quarters of the cores, the 16 x 16 MiB ring, chunks cut to the read
# threads) at 8 MiB, 32 MiB and 1 GiB, then 8 and 32 MiB in fixed 4 MiB chunks.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > "$out/machine.txt"
cmake --preset gpu > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target offload_throughput_bench > "$out/build7.txt" 2>&1 ||
  { tail -30 "$out/build7.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
mkdir -p build/snaps
for chunk in 0 4; do
  sizes=8,32,1024; [ $chunk = 4 ] && sizes=8,32
  SIESTA_BENCH_LOG=1 SIESTA_BENCH_CHUNK_MIB=$chunk SIESTA_BENCH_DIR=$PWD/build/snaps \
    SIESTA_BENCH_SIZES_MIB=$sizes SIESTA_BENCH_USED_PCT=100 timeout 90 \
    build/gpu/bench/offload_throughput_bench --benchmark_filter=save_restore/cuda \
    > "$out/throughput-chunk$chunk.txt" 2>&1
  echo "chunk $chunk rc $? at $(( $(date +%s) - start )) s"
  grep -E "^save_restore" "$out/throughput-chunk$chunk.txt" | sed -E 's/ +/ /g' | tr ' ' '\n' |
    grep -E "session_mib:|restore_gb_s=|restore_ratio=|restore_baseline_gb_s=|restore_parallel|save_ratio=" |
    tr '\n' ' ' | sed 's/save_restore/\nsave_restore/g'; echo
  rm -rf build/snaps/*
done
