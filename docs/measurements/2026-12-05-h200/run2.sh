#!/usr/bin/env bash
# H200 call 2 (2026-12-05), on the build call 1 left: conversations_bench with the RAM tier
# (all fit, a quarter fit) beside the disk alone, TTFT from RAM / disk / recomputed at 8k and
# 32k, and the server's start-up with --cache-ram-mib 65536.
set -uo pipefail
out=${OUT:?}
export LD_LIBRARY_PATH=$PWD/build/gpu-deps/lib
b=build/gpu/bench
start=$(date +%s)
mkdir -p build/snaps
for ram in 40960 8704; do
  SIESTA_BENCH_RAM_MIB=$ram SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
    SIESTA_BENCH_CTX=8192 SIESTA_BENCH_PARALLEL=4 SIESTA_BENCH_CONVERSATIONS=256 \
    SIESTA_BENCH_HISTORY=4096 SIESTA_BENCH_RETURNS=128 SIESTA_BENCH_GAP_MS=0 \
    SIESTA_BENCH_SEED=2916457347 timeout 125 $b/conversations_bench \
    --benchmark_filter=conversations/cuda > "$out/conv-ram$ram.txt" 2>&1
  echo "conversations ram $ram rc $? at $(( $(date +%s) - start )) s"
  grep -E "conversations/cuda" "$out/conv-ram$ram.txt" | tail -1 | tr ' ' '\n' | grep -E "=|ms" | tr '\n' ' '; echo
  rm -rf build/snaps/*
done
for ram in 0 16384; do
  SIESTA_BENCH_RAM_MIB=$ram SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
    SIESTA_BENCH_CTX=32832 SIESTA_BENCH_HISTORIES=8192,32768 timeout 110 $b/engine_offload_bench \
    --benchmark_filter='ttft/cuda' > "$out/ttft-ram$ram.txt" 2>&1
  echo "ttft ram $ram rc $? at $(( $(date +%s) - start )) s"
  grep -E "^ttft" "$out/ttft-ram$ram.txt" | tr ' ' '\n' | grep -E "history|_ms=|bytes=" | tr '\n' ' '; echo
  rm -rf build/snaps/*
done
# Start-up with a 64 GiB RAM tier: until /health answers, and the first completion.
mkdir -p build/srvcache
t0=$(date +%s.%N)
build/gpu/bin/siesta-server --backend auto --model synthetic:medium --port 18080 \
  --cache-idle-seconds 2 --cache-ram-mib 65536 --cache-disk-dir "$PWD/build/srvcache" \
  > "$out/server-startup.log" 2>&1 &
pid=$!
until curl -sf localhost:18080/health > /dev/null; do sleep 0.02; kill -0 $pid || break; done
t1=$(date +%s.%N)
curl -s localhost:18080/v1/completions -d '{"prompt":"hello there","max_tokens":4}' > "$out/server-first.json"
t2=$(date +%s.%N)
curl -s localhost:18080/v1/status > "$out/server-status.json"
echo "server: health after $(echo "$t1 - $t0" | bc) s, first completion $(echo "$t2 - $t1" | bc) s"
kill -TERM $pid; wait $pid; echo "server exit $?"
head -20 "$out/server-startup.log"
