#!/bin/bash
# Call 6, on the machine of calls 1-5: call 3 again with the pack of call 1
# (.carry/p6, still on the machine) putting the libutf8proc that
# bench_fused links on the library path (call 3's .carry/fused lacked it;
# bench/fused/build.sh now packs it). The CODA reference's wheels were
# installed by call 3; its kernel cache and tuning stayed under
# /tmp/coda_ref_cache.
PACK=.carry/p6 source bench/gpu_env.sh >/dev/null 2>&1
d=$(dirname "$(find "$P" -name 'libutf8proc*' | head -1)")
export LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH
bash bench/fused/run_device.sh .carry/fused coda_ref
