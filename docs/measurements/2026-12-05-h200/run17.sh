#!/usr/bin/env bash
# GPU call 17 (written 2026-12-05 evening, not yet run: no device time was left): the
# host-page prefault again, now that the restoring thread's per-chunk work is gone. On a tree
# with PrefaultAhead put back beside the device chunks (its code, test and the reader's ~25
# lines as at a5a33a4's parent, which took it out) against the tree without it carried as
# build/bench-base: 8 and 32 MiB, three rounds alternating, with the Offloader's per-restore
# log lines.
set -uo pipefail
out=${OUT:?}
start=$(date +%s)
mkdir -p /tmp/o build/snaps
nvidia-smi --query-gpu=name --format=csv,noheader | tee /tmp/o/machine.txt
b() { (cd "$1" && cmake --preset gpu > /dev/null 2>&1 && cmake --build --preset gpu -j 8 --target offload_throughput_bench > /tmp/o/build-$2.txt 2>&1) || echo "build $2 failed"; }
b build/bench-base base & b . new
wait
echo "builds: $(( $(date +%s) - start )) s"
for round in 1 2 3; do
  for side in new base; do
    bin=build/gpu/bench/offload_throughput_bench
    [ $side = base ] && bin=build/bench-base/build/gpu/bench/offload_throughput_bench
    f=/tmp/o/$side-r$round.txt
    SIESTA_BENCH_LOG=1 SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_SIZES_MIB=8,32 \
      SIESTA_BENCH_USED_PCT=100 timeout 60 $bin --benchmark_filter=save_restore/cuda > $f 2>&1
    echo "$side $round: $(grep -E '^save_restore' $f | grep -oE '(session_mib|restore_gb_s|restore_ratio)=[0-9.]+' | tr '\n' ' ')"
    rm -rf build/snaps/*
  done
done
tar -czf "$out/run17.tgz" -C /tmp o
echo "done: $(( $(date +%s) - start )) s"
