#!/bin/bash
# Call 3 (one command, on the warm machine of calls 1 and 2): the device
# trainer against the CPU plan engine for every family, and the Python
# package's CUDA tests. Carries .carry/p6.
export OUT; PACK=.carry/p6 source bench/gpu_env.sh; T0=$SECONDS
timeout -k 5 90 "$P/tests/test_train_device" > "$L/test_train_device.txt" 2>&1
echo "test_train_device exit $? ($((SECONDS-T0)) s)"; grep -E "FAIL|checks" "$L/test_train_device.txt" | tail -6
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 timeout -k 5 150 \
  python3 -m pytest -q -p no:cacheprovider -rs -k cuda python/tests > "$L/pytest-cuda.txt" 2>&1
echo "pytest rc=$? ($((SECONDS-T0)) s)"; tail -6 "$L/pytest-cuda.txt"; finish
