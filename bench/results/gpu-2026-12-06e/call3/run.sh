#!/bin/bash
# 2026-12-06 (e), call 3:
#  1. `coda bench block all --fused --tuned --floor` of the tree before the
#     signature and plan-step-kind changes (fd5217e: its coda and libcoda,
#     .carry/c5lib) and after (the call's pack), A B A B, one kernel cache
#     (the after pack's holds the before pack's kernels);
#  2. the fused-vs-plain table of every program (bench/fused/programs_table.sh
#     run), the one-file operators of several passes included.
# Carries .carry/c8, .carry/c5lib, .carry/fused3.
PACK=.carry/c8 source bench/gpu_env.sh
T0=$SECONDS
mkdir -p PK/before && python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .carry/c5lib/before.txz PK/before; Q=$PWD/PK/before/gpu
cp .carry/c5lib/commit.txt "$L/commit-before.txt"
blk() { # LABEL DIR ROUND DEADLINE
  [ $((SECONDS - T0)) -gt "$4" ] && { echo "$1$3 skipped (time)"; return 1; }
  LD_LIBRARY_PATH=$2/lib:$LD_LIBRARY_PATH timeout -k 5 90 "$2/coda" bench block all \
    --fused --tuned --floor --csv > "$L/$1$3.csv" 2> "$L/$1$3.err"
  echo "$1$3 exit $? ($((SECONDS - T0)) s)"
}
blk pre "$Q" 1 200 && blk post "$P" 1 260
blk post "$P" 2 260 && blk pre "$Q" 2 320
for f in pre1 post1 post2 pre2; do [ -f "$L/$f.csv" ] && { echo "== $f"; cut -d, -f1-12 "$L/$f.csv" | head -8; }; done
OUT=$L/programs SHAPE_S=120 timeout -k 5 $((570 - (SECONDS - T0))) bash bench/fused/programs_table.sh run .carry/fused3 > "$L/programs.txt" 2>&1
echo "programs_table rc=$? ($((SECONDS - T0)) s)"; tail -70 "$L/programs.txt"
cp "$L/programs/programs_table.json" "$O/" 2>/dev/null
finish
