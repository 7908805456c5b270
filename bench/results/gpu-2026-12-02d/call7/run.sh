#!/bin/bash
# Call 7 (d): python/tests on the GPU after the patched qkv op reorders its
# rows by a reshape instead of an index tensor (the three compile tests of
# call 6 failed on it).
. bench/results/gpu-2026-12-02c/common.sh
t0=$SECONDS
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 200 python3 -m pytest -q -p no:cacheprovider -rs python/tests > "$L/pytest.txt" 2>&1
echo "pytest exit $? ($((SECONDS - t0)) s)"; grep -E "passed|failed|^FAILED|SKIPPED" "$L/pytest.txt" | tail -8
finish
