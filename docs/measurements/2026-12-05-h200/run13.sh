#!/usr/bin/env bash
# GPU call 13 (2026-12-05 evening): device chunks sharing a staging buffer per run (one copy a
# run), fewer pool wake-ups, the restoring thread lending a hand. save_restore at 8, 32, 256
# and 1024 MiB on the base (1ba736c, carried as build/bench-base) and this tree, alternating,
# three rounds (AB_SIZES: other sizes); then (unless NO_TRACE=1) this tree with the step probe (build/trace-src, not kept) at 8 MiB.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
mkdir -p /tmp/o
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; } > /tmp/o/machine.txt
cat /tmp/o/machine.txt
b() { (cd "$1" && cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 6 --target offload_throughput_bench > /tmp/o/build-$2.txt 2>&1) || echo "build $2 failed"; }
b build/bench-base base & { [ -n "${NO_TRACE:-}" ] || b build/trace-src trace; } & b . new
wait
echo "builds: $(elapsed) s"
mkdir -p build/snaps
for round in 1 2 3; do
  for side in new base; do
    bin=build/gpu/bench/offload_throughput_bench
    [ $side = base ] && bin=build/bench-base/build/gpu/bench/offload_throughput_bench
    f=/tmp/o/$side-r$round.txt
    SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps \
      SIESTA_BENCH_SIZES_MIB=${AB_SIZES:-8,32,256,1024} SIESTA_BENCH_USED_PCT=100 timeout 200 $bin \
      --benchmark_filter=save_restore/cuda > $f 2>&1
    echo "$side round $round ($(elapsed) s):"
    grep -E '^save_restore' $f | while read -r line; do
      echo "  $(echo "$line" | grep -oE '(session_mib|restore_gb_s|restore_ratio|restore_parallel_ratio|save_ratio)=[0-9.]+' | tr '\n' ' ')"
    done
    rm -rf build/snaps/*
  done
done
[ -n "${NO_TRACE:-}" ] || for cfg in default:X=1 chunk1:SIESTA_BENCH_CHUNK_MIB=1 host0:SIESTA_BENCH_HOST_KIB=0; do
  name=${cfg%%:*}
  env ${cfg#*:} SIESTA_TRACE=1 SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8 \
    SIESTA_BENCH_USED_PCT=100 timeout 100 build/trace-src/build/gpu/bench/offload_throughput_bench \
    --benchmark_filter=save_restore/cuda > /tmp/o/trace-$name.txt 2>&1
  echo "trace $name: $(grep -E '^save_restore' /tmp/o/trace-$name.txt | grep -oE '(restore_gb_s|restore_ratio)=[0-9.]+' | tr '\n' ' ')"
  rm -rf build/snaps/*
done
tar -czf "$out/run13.tgz" -C /tmp o
echo "done: $(elapsed) s"
