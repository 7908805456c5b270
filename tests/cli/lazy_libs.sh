#!/bin/sh
# cuBLAS and NVRTC are loaded when they are first needed, not at start:
# in a CUDA build, commands that need no GPU compiler or cuBLAS (coda
# version, coda check, a CPU coda run, CPU training) must not map
# libcublas or libnvrtc. The dynamic loader's own trace (LD_DEBUG=libs)
# names every library it loads, at start (DT_NEEDED) and by dlopen. As a
# control that the trace sees a dlopen, coda compile (NVRTC, no GPU
# needed) must load libnvrtc. Skipped (77) in a build without CUDA.
#
#   sh tests/cli/lazy_libs.sh PATH/TO/coda WORKDIR CUDA_BUILD(ON|OFF)
[ "${3:-OFF}" = ON ] || { echo "skip: a build without CUDA links neither library"; exit 77; }
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fails=0
write_corpus
printf 'input x : tile bf16\noutput y : bf16\nstore y = acc + x\n' >prog.coda

# loads NAME -- ARGS...: the libraries coda ARGS loaded, one per line
loads() {
  LD_DEBUG=libs "$coda" "$@" >out.txt 2>trace.txt </dev/null
  echo "rc=$?" >rc.txt
  sed -n 's/.*find library=\([^ ;]*\).*/\1/p; s/.*calling init: \(.*\)/\1/p' trace.txt | sort -u
}
none() { # none DESC -- ARGS...
  desc=$1
  shift 2
  got=$(loads "$@" | grep -E 'libcublas|libnvrtc')
  if ! grep -q "rc=0" rc.txt; then
    fails=$((fails + 1)); echo "FAIL: $desc: coda $* failed"; grep -v '^ *[0-9]*:' trace.txt | head -5
  elif [ -n "$got" ]; then
    fails=$((fails + 1)); echo "FAIL: $desc maps $(echo "$got" | tr '\n' ' ')"
  else
    echo "ok: $desc loads neither cuBLAS nor NVRTC"
  fi
}
none "coda version" -- version
none "coda check" -- check prog.coda
none "a CPU coda run" -- run prog.coda --m 64 --n 128 --k 32 --reps 1
none "CPU training" -- train --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 \
  --batch 2 --val-batches 0 --quiet --corpus corpus --out o --steps 2 --device cpu

# the control: compiling a kernel loads NVRTC, by dlopen, after start
CODA_CACHE_DIR=$work/cache LD_DEBUG=libs "$coda" compile prog.coda >out.txt 2>trace.txt </dev/null
rc=$?
if ! grep -q 'find library=libnvrtc' trace.txt; then
  fails=$((fails + 1)); echo "FAIL: coda compile did not load libnvrtc (rc $rc): the trace sees no dlopen"
  grep -v '^ *[0-9]*:' trace.txt | head -5
elif [ "$rc" -ne 0 ] && ! grep -q 'libnvrtc' trace.txt; then
  fails=$((fails + 1)); echo "FAIL: coda compile failed without naming NVRTC"
else
  echo "ok: coda compile loads libnvrtc when it compiles (rc $rc)"
fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
