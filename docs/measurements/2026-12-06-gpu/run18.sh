#!/usr/bin/env bash
# GPU call 18 (2026-12-06): where a 256 MiB restore's last GB/s are. The tree at 5a76904 (read
# threads three quarters of the cores, chunks cut to 2 x the threads), save_restore at 256 MiB
# and 1 GiB over the read threads (default 12, 14, 16) and the chunk size (default 4, 2 MiB), two
# rounds; then 8 and 32 MiB with the 1 MiB host region and without (three rounds); then the cold path at 64 and 512 MiB (7 rounds); then time to first token from a
# 16 GiB RAM tier (the bench's untimed first save now makes room in the tier).
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
mkdir -p /tmp/o build/snaps
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; } > /tmp/o/machine.txt
cat /tmp/o/machine.txt
finish() { tar -czf "$out/run18.tgz" -C /tmp o; echo "done: $(elapsed) s"; }
cmake --preset gpu > /tmp/o/configure.txt 2>&1 &&
  cmake --build --preset gpu -j 16 --target offload_throughput_bench cold_restore_bench engine_offload_bench \
    > /tmp/o/build.txt 2>&1 || { tail -30 /tmp/o/build.txt; finish; exit 1; }
echo "build: $(elapsed) s"
for round in 1 2; do
  for cfg in default:X=1 t14:SIESTA_BENCH_THREADS=14 t16:SIESTA_BENCH_THREADS=16 c2:SIESTA_BENCH_CHUNK_MIB=2 \
             t14c2:SIESTA_BENCH_THREADS=14,SIESTA_BENCH_CHUNK_MIB=2 t16c2:SIESTA_BENCH_THREADS=16,SIESTA_BENCH_CHUNK_MIB=2; do
    name=${cfg%%:*}
    f=/tmp/o/sweep-$name-r$round.txt
    env $(echo "${cfg#*:}" | tr ',' ' ') SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps \
      SIESTA_BENCH_SIZES_MIB=256,1024 SIESTA_BENCH_USED_PCT=100 timeout 60 \
      build/gpu/bench/offload_throughput_bench --benchmark_filter=save_restore/cuda > $f 2>&1
    grep -E '^save_restore' $f | while read -r line; do
      echo "$name r$round: $(echo "$line" | grep -oE '(session_mib|restore_gb_s|restore_parallel_baseline_gb_s|restore_parallel_ratio)=[0-9.]+' | tr '\n' ' ')"
    done
    rm -rf build/snaps/*
  done
  echo "round $round: $(elapsed) s"
done
for round in 1 2 3; do
  for host in 1024 0; do
    f=/tmp/o/small-host$host-r$round.txt
    SIESTA_BENCH_HOST_KIB=$host SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8,32 \
      SIESTA_BENCH_USED_PCT=100 timeout 60 build/gpu/bench/offload_throughput_bench --benchmark_filter=save_restore/cuda > $f 2>&1
    grep -E '^save_restore' $f | while read -r line; do
      echo "host $host r$round: $(echo "$line" | grep -oE '(session_mib|restore_gb_s|restore_ratio)=[0-9.]+' | tr '\n' ' ')"
    done
    rm -rf build/snaps/*
  done
done
echo "small: $(elapsed) s"
SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_COLD_SIZES_MIB=64,512 SIESTA_BENCH_ROUNDS=7 timeout 120 \
  build/gpu/bench/cold_restore_bench > /tmp/o/cold.txt 2>&1
echo "cold rc $? at $(elapsed) s"
grep -E "^cold" /tmp/o/cold.txt | grep -oE "(size_mib:[0-9]+|restore_GBps|best_raw_GBps|restore_vs_best|buffered_seq_GBps|direct_q[0-9]+_GBps|buffered_par_GBps)=?[0-9.]*" | paste -sd' '
rm -rf build/snaps/*
left=$(( 560 - $(elapsed) ))
if [ $left -gt 60 ]; then
  SIESTA_BENCH_RAM_MIB=16384 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium \
    SIESTA_BENCH_CTX=131136 SIESTA_BENCH_HISTORIES=8192,32768,131072 timeout $left \
    build/gpu/bench/engine_offload_bench --benchmark_filter='ttft/cuda' > /tmp/o/ttft-ram16384.txt 2>&1
  echo "ttft rc $? at $(elapsed) s"
  grep -E "^ttft" /tmp/o/ttft-ram16384.txt | grep -oE "(history_tokens|restored_ms|restore_ms|resident_ms|ram_restores)=[0-9.k]+" | paste -sd' ' | sed 's/history_tokens/\nhistory_tokens/g'
fi
finish
