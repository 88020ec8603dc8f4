#!/usr/bin/env bash
# H200 call 1 (2026-12-05): build the gpu preset's benches there, then the RAM tier's copies
# against the link (256 MiB-8 GiB), the cold restore on the machine's disk, and the gpu tests.
set -uo pipefail
out=${OUT:?}
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; free -g | head -2; df -h . | tail -1
  findmnt -T . -o SOURCE,FSTYPE | tail -1
} > "$out/machine.txt" 2>&1
start=$(date +%s)
deps=$PWD/build/gpu-deps  # cpp-httplib for the server (scripts/gpu-server-check --prepare)
export LD_LIBRARY_PATH=$deps/lib
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target ram_tier_copy_bench cold_restore_bench \
  engine_offload_bench conversations_bench offload_throughput_bench snapshot_bench gpu_tests \
  siesta-server \
  > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s" | tee -a "$out/machine.txt"
b=build/gpu/bench
SIESTA_BENCH_RAM_SIZES_MIB=256,1024,4096,8192 timeout 150 $b/ram_tier_copy_bench \
  --benchmark_filter=cuda --benchmark_repetitions=3 \
  --benchmark_out="$out/ram_tier_copy.json" --benchmark_out_format=json > "$out/ram_tier_copy.txt" 2>&1
echo "ram_tier_copy rc $? at $(( $(date +%s) - start )) s"
SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_COLD_SIZES_MIB=64,512,2048 SIESTA_BENCH_ROUNDS=3 \
  timeout 150 $b/cold_restore_bench --benchmark_out="$out/cold_restore.json" \
  --benchmark_out_format=json > "$out/cold_restore.txt" 2>&1
echo "cold_restore rc $? at $(( $(date +%s) - start )) s"
timeout 120 build/gpu/tests/gpu_tests --gtest_brief=1 > "$out/gpu_tests.txt" 2>&1
echo "gpu_tests rc $? at $(( $(date +%s) - start )) s"
tail -3 "$out/gpu_tests.txt"
if [ $(( $(date +%s) - start )) -lt 330 ]; then
  SIESTA_BENCH_DIR=$PWD/build SIESTA_BENCH_SIZES_MIB=8,32,256,1024,4096,8192 SIESTA_BENCH_USED_PCT=100 \
    timeout $(( 560 - ($(date +%s) - start) )) $b/offload_throughput_bench \
    --benchmark_filter=save_restore/cuda --benchmark_out="$out/throughput.json" \
    --benchmark_out_format=json > "$out/throughput.txt" 2>&1
  echo "throughput rc $? at $(( $(date +%s) - start )) s"
  grep -E "^save_restore" "$out/throughput.txt" | head -20
fi
grep -E "save_vs_link|restore_vs_link" "$out/ram_tier_copy.txt" | grep -E "median" | head -20
grep -vE "^\s*$" "$out/cold_restore.txt" | tail -15
