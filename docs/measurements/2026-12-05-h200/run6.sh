#!/usr/bin/env bash
# GPU call 6 (2026-12-05): the tree with reads on three quarters of the cores and the CUDA
# staging ring in 16 x 16 MiB, reading each chunk straight into its destination: the gpu
# tests after save_restore at the defaults from 8 MiB to 4 GiB (restore from the page cache
# against a single-threaded and a parallel raw read + copy in of the same bytes), small
# snapshots cut to the read threads against fixed 4 MiB chunks.
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > "$out/machine.txt"
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target gpu_tests offload_throughput_bench engine_offload_bench \
  siesta-server ram_tier_copy_bench > "$out/build6.txt" 2>&1 || { tail -30 "$out/build6.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
mkdir -p build/snaps
SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8,32,1024,4096 SIESTA_BENCH_USED_PCT=100 \
  timeout 300 build/gpu/bench/offload_throughput_bench \
  --benchmark_filter=save_restore/cuda --benchmark_out="$out/throughput.json" \
  --benchmark_out_format=json > "$out/throughput.txt" 2>&1
echo "throughput rc $? at $(( $(date +%s) - start )) s"
grep -E "^save_restore" "$out/throughput.txt" | sed -E 's/ +/ /g' | tr ' ' '\n' |
  grep -E "session_mib:|restore_gb_s=|restore_ratio=|restore_baseline_gb_s=|restore_parallel|save_gb_s=|save_ratio=" |
  tr '\n' ' ' | sed 's/save_restore/\nsave_restore/g'; echo
mkdir -p build/snaps
SIESTA_BENCH_CHUNK_MIB=4 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8,32 \
  SIESTA_BENCH_USED_PCT=100 timeout 60 build/gpu/bench/offload_throughput_bench \
  --benchmark_filter=save_restore/cuda > "$out/throughput-chunk4.txt" 2>&1
echo "fixed 4 MiB chunks rc $? at $(( $(date +%s) - start )) s"
grep -E "^save_restore" "$out/throughput-chunk4.txt" | sed -E 's/ +/ /g' | tr ' ' '\n' |
  grep -E "session_mib:|restore_gb_s=|restore_ratio=|restore_parallel_ratio" |
  tr '\n' ' ' | sed 's/save_restore/\nsave_restore/g'; echo
rm -rf build/snaps
timeout 200 build/gpu/tests/gpu_tests --gtest_brief=1 > "$out/gpu_tests.txt" 2>&1
echo "gpu_tests rc $? at $(( $(date +%s) - start )) s"; tail -3 "$out/gpu_tests.txt"
