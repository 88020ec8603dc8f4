#!/usr/bin/env bash
# H200 call 3 (2026-12-05): the RAM tier's 100-cycle gpu test (its expectation updated for
# delta saves over a RAM copy), TTFT restored from the RAM tier at 8k and 32k, and the
# server's start-up with --cache-ram-mib 65536 against 0 in the same run.
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target gpu_tests engine_offload_bench siesta-server \
  ram_tier_copy_bench \
  > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
timeout 120 build/gpu/tests/gpu_tests --gtest_filter='*RamTier*:*HundredCycles*' > "$out/gpu_tier_test.txt" 2>&1
echo "gpu tier tests rc $? at $(( $(date +%s) - start )) s"; grep -E "OK \]|FAILED|PASSED" "$out/gpu_tier_test.txt" | tail -6
SIESTA_BENCH_RAM_SIZES_MIB=8,32 timeout 60 build/gpu/bench/ram_tier_copy_bench \
  --benchmark_filter=cuda/pool --benchmark_repetitions=3 > "$out/ram_tier_copy_small.txt" 2>&1
echo "ram tier small rc $? at $(( $(date +%s) - start )) s"; grep median "$out/ram_tier_copy_small.txt"
mkdir -p build/snaps
SIESTA_BENCH_RAM_MIB=16384 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
  SIESTA_BENCH_CTX=131136 SIESTA_BENCH_HISTORIES=8192,32768,131072 timeout 150 \
  build/gpu/bench/engine_offload_bench --benchmark_filter='ttft/cuda' > "$out/ttft-ram16384.txt" 2>&1
echo "ttft ram rc $? at $(( $(date +%s) - start )) s"; grep -E "^ttft" "$out/ttft-ram16384.txt"
rm -rf build/snaps/*
SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium SIESTA_BENCH_CTX=131136 \
  SIESTA_BENCH_HISTORIES=131072 timeout 160 build/gpu/bench/engine_offload_bench \
  --benchmark_filter='ttft/cuda' > "$out/ttft-disk-128k.txt" 2>&1
echo "ttft disk 128k rc $? at $(( $(date +%s) - start )) s"; grep -E "^ttft" "$out/ttft-disk-128k.txt"
for ram in 0 65536 0 65536; do
  rm -rf build/srvcache; mkdir -p build/srvcache
  t0=$(date +%s%N)
  build/gpu/bin/siesta-server --backend auto --model synthetic:medium --port 18080 \
    --cache-idle-seconds 2 --cache-ram-mib $ram --cache-disk-dir "$PWD/build/srvcache" \
    > "$out/server-ram$ram.log" 2>&1 &
  pid=$!
  until curl -sf localhost:18080/health > /dev/null; do sleep 0.01; kill -0 $pid || break; done
  t1=$(date +%s%N)
  curl -s localhost:18080/v1/completions -d '{"prompt":"hello there","max_tokens":4}' > "$out/server-first-ram$ram.json"
  t2=$(date +%s%N)
  echo "server --cache-ram-mib $ram: /health after $(( (t1 - t0) / 1000000 )) ms, first completion $(( (t2 - t1) / 1000000 )) ms"
  kill -TERM $pid; wait $pid
done
