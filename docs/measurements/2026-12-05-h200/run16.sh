#!/usr/bin/env bash
# GPU call 16 (2026-12-05 evening): run15's time to first token from the RAM tier again, the
# bench now taking a save that lands in the RAM tier where it meant to lose a file (and
# counting how many restores came from RAM: ram_restores); 8k, 32k and 128k tokens, then the
# same on disk (no RAM tier) for the ratio.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 16 --target engine_offload_bench > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
mkdir -p build/snaps
for ram in 16384 0; do
  SIESTA_BENCH_RAM_MIB=$ram SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
    SIESTA_BENCH_CTX=131136 SIESTA_BENCH_HISTORIES=8192,32768,131072 timeout 220 \
    build/gpu/bench/engine_offload_bench --benchmark_filter='ttft/cuda' > "$out/ttft-ram$ram.txt" 2>&1
  echo "ttft ram $ram rc $? at $(( $(date +%s) - start )) s"
  grep -E "^ttft" "$out/ttft-ram$ram.txt" | grep -oE "(history_tokens|restored_ms|restore_ms|resident_ms|fallback_ms|ram_restores)=[0-9.k]+" | paste -sd' ' | sed 's/history_tokens/\nhistory_tokens/g'
  rm -rf build/snaps/*
done
