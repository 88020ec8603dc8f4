#!/usr/bin/env bash
# H200 call 4 (written 2026-12-05, for the next lent machine): conversations across a restart
# and the library. restart_bench on CUDA: the start with 1000 conversations to adopt against an
# empty directory, and the TTFT of an adopted 32k conversation of synthetic:medium against
# recomputing it (same engine, same run); the installed package's CUDA example
# (examples/cuda_offload: its VMM rows offloaded by the idle timer and restored at the same
# address, bytes checked); the restart e2e tests on the CUDA backend's server.
set -uo pipefail
out=${OUT:?}
deps=$PWD/build/gpu-deps
export LD_LIBRARY_PATH=$deps/lib
start=$(date +%s)
cmake --preset gpu -DSIESTA_HTTPLIB_INCLUDE_DIR="$deps/include" \
  -DSIESTA_HTTPLIB_LIBRARY="$deps/lib/libcpp-httplib.so" > "$out/configure.txt" 2>&1
cmake --build --preset gpu -j 16 --target restart_bench siesta-server siesta_offload \
  siesta_backend_sim siesta_backend_cuda > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
rm -rf build/prefix && cmake --install build/gpu --prefix "$PWD/build/prefix" > "$out/install.txt" 2>&1
cmake -S examples/cuda_offload -B build/cuda-example -DCMAKE_PREFIX_PATH="$PWD/build/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$out/example-configure.txt" 2>&1
cmake --build build/cuda-example -j 16 > "$out/example-build.txt" 2>&1
timeout 60 build/cuda-example/cuda_offload "$PWD/build/example-snaps" > "$out/cuda_example.txt" 2>&1
echo "cuda example rc $? at $(( $(date +%s) - start )) s"; cat "$out/cuda_example.txt" | tail -4
mkdir -p build/snaps
SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:small SIESTA_BENCH_CONVERSATIONS=1000 \
  timeout 240 build/gpu/bench/restart_bench --benchmark_filter='restart_startup/cuda' \
  > "$out/restart_startup.txt" 2>&1
echo "restart startup rc $? at $(( $(date +%s) - start )) s"; grep -E "^restart" "$out/restart_startup.txt"
rm -rf build/snaps/*
SIESTA_BENCH_DIR=$PWD/build/snaps SIESTA_BENCH_MODEL=synthetic:medium SIESTA_BENCH_CTX=32832 \
  SIESTA_BENCH_LONG=32768 timeout 120 build/gpu/bench/restart_bench \
  --benchmark_filter='restart_ttft/cuda' > "$out/restart_ttft_32k.txt" 2>&1
echo "restart ttft rc $? at $(( $(date +%s) - start )) s"; grep -E "^restart" "$out/restart_ttft_32k.txt"
