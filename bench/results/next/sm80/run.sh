#!/bin/bash
# Prepared call: the GPU suite with the sm80 path forced (CODA_ARCH=sm80)
# on an H100/H200: tests/gpu/run_all.sh's sm80 stage (every epilogue
# program in the four layouts, the attention's mma.sync variants, the
# block plans, graphs, the decoder, the optimizer). Carries .carry/p7
# (tests/gpu/pack_shared.sh of the tree). NVRTC compiles the sm80 path's
# kernels missing from the pack on the first run (minutes); a second call
# on the warm machine finds them in the cache.
PACK=${PACK:-.carry/p7} source bench/gpu_env.sh
OUT=$L/sm80 timeout -k 10 560 tests/gpu/run_all.sh "$P" sm80 > "$L/sm80.txt" 2>&1
echo "run_all sm80 rc=$?"; tail -30 "$L/sm80.txt"
finish
