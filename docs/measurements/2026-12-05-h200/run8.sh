#!/usr/bin/env bash
# GPU call 8 (2026-12-05, tree after a5056c5): save_restore at the defaults (reads on three
# quarters of the cores, the 16 x 16 MiB ring, small files cut to the read threads) from 8 MiB
# to 4 GiB, then 8 and 32 MiB in fixed 4 MiB chunks, the cold restore (chunks cut to the
# read threads, raw reads up to 16 in flight), then the gpu tests, then 8 GiB if the
# call has time left.
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > "$out/machine.txt"
cat "$out/machine.txt"
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target offload_throughput_bench cold_restore_bench > "$out/build8.txt" 2>&1 ||
  { tail -30 "$out/build8.txt"; exit 1; }
echo "build: $(elapsed) s"
summary() {
  grep -E "^save_restore" "$1" | sed -E 's/ +/ /g' | tr ' ' '\n' |
    grep -E "session_mib:|restore_gb_s=|restore_ratio=|restore_baseline_gb_s=|restore_fresh_ratio=|restore_parallel|save_gb_s=|save_ratio=" |
    tr '\n' ' ' | sed 's/save_restore/\nsave_restore/g'; echo
}
throughput() {  # throughput NAME CHUNK_MIB SIZES LIMIT_S
  mkdir -p build/snaps
  SIESTA_BENCH_LOG=1 SIESTA_BENCH_CHUNK_MIB=$2 SIESTA_BENCH_DIR=$PWD/build/snaps \
    SIESTA_BENCH_SIZES_MIB=$3 SIESTA_BENCH_USED_PCT=100 timeout "$4" \
    build/gpu/bench/offload_throughput_bench --benchmark_filter=save_restore/cuda \
    --benchmark_out="$out/$1.json" --benchmark_out_format=json > "$out/$1.txt" 2> "$out/$1.log"
  echo "$1 rc $? at $(elapsed) s"
  summary "$out/$1.txt"
  rm -rf build/snaps
}
throughput throughput-defaults 0 8,32,256,1024,4096 220
throughput throughput-chunk4 4 8,32 60
SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512 timeout 100 \
  build/gpu/bench/cold_restore_bench > "$out/cold_restore.txt" 2>&1
echo "cold rc $? at $(elapsed) s"; grep -E "^cold_restore" "$out/cold_restore.txt" | sed -E 's/ +/ /g'
cmake --build --preset gpu -j 16 --target gpu_tests > "$out/build8-tests.txt" 2>&1 ||
  { tail -30 "$out/build8-tests.txt"; exit 1; }
echo "build tests: $(elapsed) s"
timeout 150 build/gpu/tests/gpu_tests --gtest_brief=1 > "$out/gpu_tests.txt" 2>&1
echo "gpu_tests rc $? at $(elapsed) s"; tail -3 "$out/gpu_tests.txt"
left=$(( 570 - $(elapsed) ))
if [ $left -gt 60 ]; then throughput throughput-8g 0 8192 $left; fi
