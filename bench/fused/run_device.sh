#!/bin/bash
# On a machine with an sm_90 GPU: the fused-GEMM benchmark (bench_fused:
# plain GEMM, fused GEMM, cuBLAS + separate kernels) and, in the same call,
# PyTorch eager and quack on the same operations (quack_fused.py) and, with
# coda_ref, the CODA paper authors' kernels (coda_ref_fused.py). Logs go to
# $OUT. Takes the folder written by build.sh (default .carry/fused);
# installs the wheels of .whl/ (fetch_quack.sh) when present. About 2-3
# minutes of GPU time, most of it quack compiling its kernels.
#
#   bash bench/fused/run_device.sh [PACK_DIR] [coda_ref|coda_ref_only]
#   bash bench/fused/run_device.sh stage
#
# coda_ref (or CODA_REF=1): the wheels of fetch_coda_ref.sh, carried as
# .whl/coda1 and/or .whl/coda2, are staged in $CODA_WHL (default
# /tmp/coda_whl, kept while the machine stays warm), split wheels joined,
# and, once the set named by MANIFEST is complete, installed into
# $CODA_SITE (default /tmp/coda_site) and coda_ref_fused.py run after
# bench_fused (quack_fused.py then runs only if quack's own wheels are
# carried, to stay within one call). 'stage' only stages the carried folder
# (the first of two calls); coda_ref_only runs coda_ref_fused.py alone (a
# later call on the same warm machine, to finish rows that the first one's
# time budget skipped: compiled kernels and tuning are reused).
# CODA_REF_ARGS, CODA_REF_S and CODA_REF_BUDGET_S pass options and time
# limits (coda-kernels autotunes each kernel on its first call; its kernel
# cache and tuning results stay under /tmp/coda_ref_cache for a later call
# on the same machine).
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fused-out}
CODA_WHL=${CODA_WHL:-/tmp/coda_whl}
CODA_SITE=${CODA_SITE:-/tmp/coda_site}
mkdir -p "$OUT"

# stages .whl/coda1 and .whl/coda2; installs once complete; 0 when installed
coda_ref_install() {
  mkdir -p "$CODA_WHL"
  for d in .whl/coda1 .whl/coda2; do
    [ -d "$d" ] && cp -f "$d"/* "$CODA_WHL"/
  done
  for p in "$CODA_WHL"/*.whl.part1of2; do
    [ -e "$p" ] || continue
    w=${p%.part1of2}
    [ -e "$w.part2of2" ] && cat "$p" "$w.part2of2" > "$w" && rm -f "$p" "$w.part2of2"
  done
  [ -s "$CODA_WHL/MANIFEST" ] || { echo "coda-kernels: no wheels staged (fetch_coda_ref.sh; carry .whl/coda1)"; return 1; }
  local missing
  missing=$(while read -r w; do [ -e "$CODA_WHL/$w" ] || echo "$w"; done < "$CODA_WHL/MANIFEST")
  if [ -n "$missing" ]; then
    echo "coda-kernels: staged in $CODA_WHL; still missing (carry the other folder):" $missing
    return 1
  fi
  cmp -s "$CODA_WHL/MANIFEST" "$CODA_SITE/MANIFEST" && return 0  # installed by an earlier call
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$CODA_SITE" "$CODA_WHL"/*.whl > "$OUT/coda_pip.log" 2>&1 || { tail -5 "$OUT/coda_pip.log"; return 1; }
  cp "$CODA_WHL/MANIFEST" "$CODA_SITE/"
  echo "coda-kernels: installed $(wc -l < "$CODA_WHL/MANIFEST") wheels into $CODA_SITE"
}

if [ "${1:-}" = stage ]; then
  coda_ref_install
  exit 0
fi
P=${1:-.carry/fused}
[ "${2:-}" = coda_ref ] && CODA_REF=1
[ "${2:-}" = coda_ref_only ] && CODA_REF=1 ONLY=1
# within one call's 10 minutes: bench_fused up to 150 s, then coda_ref_fused
CODA_REF_S=${CODA_REF_S:-${ONLY:+560}}; CODA_REF_S=${CODA_REF_S:-380}
CODA_REF_BUDGET_S=${CODA_REF_BUDGET_S:-$((CODA_REF_S - 90))}
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
if [ -z "${ONLY:-}" ]; then
  tar -xzf "$P/fused.tgz" -C "$W" || { echo "no $P/fused.tgz (run bench/fused/build.sh)"; exit 1; }
  export CODA_CACHE_DIR=$W/cache
  LD_LIBRARY_PATH="$W/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout ${BENCH_S:-150} "$W/bench_fused" ${BENCH_ARGS:-} > "$OUT/bench_fused.md" 2> "$OUT/bench_fused.err"
  echo "bench_fused rc=$?"
  cat "$OUT/bench_fused.md"; tail -5 "$OUT/bench_fused.err"
fi
if [ "${CODA_REF:-0}" = 1 ]; then
  if coda_ref_install; then
    # the CuTe DSL wheel puts its packages on the path with a .pth file,
    # which PYTHONPATH folders do not read
    PYTHONPATH=$CODA_SITE:$CODA_SITE/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH} \
      PYTHONUNBUFFERED=1 timeout $CODA_REF_S python3 bench/fused/coda_ref_fused.py \
      --budget-s $CODA_REF_BUDGET_S --json "$OUT/coda_ref_fused.json" ${CODA_REF_ARGS:-} \
      > "$OUT/coda_ref_fused.md" 2> "$OUT/coda_ref_fused.err"
    echo "coda_ref_fused rc=$?"
  else
    echo "coda-kernels: wheels not installed; PyTorch rows only"
    PYTHONUNBUFFERED=1 timeout $CODA_REF_S python3 bench/fused/coda_ref_fused.py \
      --json "$OUT/coda_ref_fused.json" ${CODA_REF_ARGS:-} \
      > "$OUT/coda_ref_fused.md" 2> "$OUT/coda_ref_fused.err"
    echo "coda_ref_fused rc=$?"
  fi
  cat "$OUT/coda_ref_fused.md"; grep -v "^ " "$OUT/coda_ref_fused.err" | tail -8
  [ -z "${ONLY:-}" ] && ls .whl/*.whl > /dev/null 2>&1 || { rm -rf "$W"; exit 0; }
fi
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
  # the CuTe DSL wheel puts its packages on the path with a .pth file,
  # which PYTHONPATH folders do not read
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/python_packages${PYTHONPATH:+:$PYTHONPATH}
else
  echo "no wheels in .whl/ (bench/fused/fetch_quack.sh): PyTorch rows only"
fi
PYTHONUNBUFFERED=1 timeout ${QUACK_S:-200} python3 bench/fused/quack_fused.py \
  --budget-s ${QUACK_BUDGET_S:-140} ${QUACK_ARGS:-} > "$OUT/quack_fused.md" 2> "$OUT/quack_fused.err"
echo "quack_fused rc=$?"
cat "$OUT/quack_fused.md"; grep -v "^ " "$OUT/quack_fused.err" | tail -8
rm -rf "$W"
