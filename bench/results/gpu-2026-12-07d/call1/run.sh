#!/bin/bash
# Prepared call: the GPU suite with the sm80 path forced (CODA_ARCH=sm80)
# on an H100/H200: tests/gpu/run_all.sh's sm80 stage (every epilogue
# program in the four layouts, the attention's mma.sync variants, the
# block plans, graphs, the decoder, the optimizer, the trainer's device
# test and the training smoke test). First, on the default path, the
# trainer's device test (every family's plans bound to the flat weights
# and gradient, against the CPU plan engine), which has not run on a GPU.
# Carries .carry/p8 (tests/gpu/pack_shared.sh of the tree). NVRTC
# compiles the sm80 path's kernels missing from the pack on the first run;
# SKIP_STEPS (run_all.sh) lets a second call on the warm machine go on
# where a first was cut short. LIMIT: seconds for the whole call.
PACK=${PACK:-.carry/p8} source bench/gpu_env.sh
T0=$SECONDS
KEEP=/tmp/coda-sm80-cache # kernels NVRTC compiled here, for a later call on the warm machine
mkdir -p "$KEEP"; cp -n "$KEEP"/epi-*.cubin "$P/cache/" 2> /dev/null
if [ -z "${SKIP_DEFAULT:-}" ]; then
  timeout -k 5 90 "$P/tests/test_train_device" > "$L/test_train_device.txt" 2>&1
  echo "test_train_device (default path) exit $? ($((SECONDS - T0)) s)"; tail -4 "$L/test_train_device.txt"
fi
left=$(( ${LIMIT:-560} - (SECONDS - T0) ))
OUT=$L/sm80 timeout -k 10 "$left" tests/gpu/run_all.sh "$P" sm80 > "$L/sm80.txt" 2>&1
echo "run_all sm80 rc=$? ($((SECONDS - T0)) s)"; grep "^== .*exit\|skipped" "$L/sm80/gpu-tests.log"
grep -E "failed|FAIL|passed|PASS" "$L/sm80/gpu-tests.log" | tail -25
cp -n "$P"/cache/epi-*.cubin "$KEEP/" 2> /dev/null
finish
