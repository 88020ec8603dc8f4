#!/usr/bin/env bash
# GPU call 15 (2026-12-05 evening): what run3.sh owed, cut to fit the session's device time:
# the time to first token restored from the RAM tier (16 GiB) at 8k, 32k and 128k tokens, and
# the server's start-up with --cache-ram-mib 65536 against 0 in the same run (twice each).
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/machine.txt"
cat "$out/machine.txt"
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target engine_offload_bench siesta-server > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
for ram in 0 65536 0 65536; do
  rm -rf build/srvcache; mkdir -p build/srvcache
  t0=$(date +%s%N)
  build/gpu/bin/siesta-server --backend auto --model synthetic:medium --port 18080 \
    --cache-idle-seconds 2 --cache-ram-mib $ram --cache-disk-dir "$PWD/build/srvcache" \
    > "$out/server-ram$ram.log" 2>&1 &
  pid=$!
  until curl -sf localhost:18080/health > /dev/null; do sleep 0.01; kill -0 $pid 2>/dev/null || break; done
  t1=$(date +%s%N)
  curl -s localhost:18080/v1/completions -d '{"prompt":"hello there","max_tokens":4}' > "$out/server-first-ram$ram.json"
  t2=$(date +%s%N)
  echo "server --cache-ram-mib $ram: /health after $(( (t1 - t0) / 1000000 )) ms, first completion $(( (t2 - t1) / 1000000 )) ms"
  kill -TERM $pid; wait $pid
done
mkdir -p build/snaps
SIESTA_BENCH_RAM_MIB=16384 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
  SIESTA_BENCH_CTX=131136 SIESTA_BENCH_HISTORIES=8192,32768,131072 timeout 200 \
  build/gpu/bench/engine_offload_bench --benchmark_filter='ttft/cuda' > "$out/ttft-ram16384.txt" 2>&1
echo "ttft ram rc $? at $(( $(date +%s) - start )) s"; grep -E "^ttft" "$out/ttft-ram16384.txt"
echo "done: $(( $(date +%s) - start )) s"
