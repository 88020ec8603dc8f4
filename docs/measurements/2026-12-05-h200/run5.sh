#!/usr/bin/env bash
# H200 call 5 (2026-12-05): what limits a restore from the page cache. save_restore of the
# throughput bench at 8 MiB to 4 GiB under sealing threads (SIESTA_BENCH_THREADS) and staging
# rings (SIESTA_BENCH_STAGING_COUNT x SIESTA_BENCH_STAGING_MIB) other than today's defaults
# (4 threads, 4 x 64 MiB), each restore's breakdown logged (SIESTA_BENCH_LOG=1).
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target offload_throughput_bench > "$out/build5.txt" 2>&1 ||
  { tail -30 "$out/build5.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
mkdir -p build/snaps
sweep() {  # name threads count mib chunk sizes
  SIESTA_BENCH_LOG=1 SIESTA_BENCH_THREADS=$2 SIESTA_BENCH_STAGING_COUNT=$3 SIESTA_BENCH_STAGING_MIB=$4 \
    SIESTA_BENCH_CHUNK_MIB=$5 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=$6 \
    SIESTA_BENCH_USED_PCT=100 timeout 100 build/gpu/bench/offload_throughput_bench \
    --benchmark_filter=save_restore/cuda > "$out/sweep-$1.txt" 2>&1
  echo "== $1 (threads $2, staging $3 x $4 MiB, chunk $5 MiB) rc $? at $(( $(date +%s) - start )) s"
  grep -E "^save_restore" "$out/sweep-$1.txt" | sed -E 's/ +/ /g' | tr ' ' '\n' |
    grep -E "session_mib:|restore_gb_s=|restore_ratio=|restore_baseline_gb_s=|restore_parallel|save_gb_s=" | tr '\n' ' ' |
    sed 's/save_restore/\nsave_restore/g'; echo
  rm -rf build/snaps/*
}
sweep t4-s4x64 4 4 64 4 8,32,1024
sweep t8-s16x16 8 16 16 4 8,32,1024
sweep t12-s16x16 12 16 16 4 8,32,1024
sweep t15-s24x16 15 24 16 4 8,32,1024
sweep t8-s16x16-c1 8 16 16 1 8,32
sweep t12-s32x8-c1 12 32 8 1 8,32,1024
echo "at $(( $(date +%s) - start )) s"
if [ $(( $(date +%s) - start )) -lt 400 ]; then
  sweep t12-s16x16-4g 12 16 16 4 4096
  sweep t4-s4x64-4g 4 4 64 4 4096
fi
