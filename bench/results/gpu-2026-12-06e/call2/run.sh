#!/bin/bash
# 2026-12-06 (e), call 2: the fused-vs-plain table of every program
# (bench/fused/programs_table.sh run), the one-file operators of several
# passes included, on the warm machine after call 1. Carries .carry/c8
# (for its lib/, which holds the libutf8proc bench_fused loads) and
# .carry/fused3 (bash bench/fused/build.sh --programs build .carry/fused3).
# Two earlier tries of this call ran without c8's lib/ and bench_fused did
# not start (libutf8proc.so.2 not found): no rows.
PACK=.carry/c8 source bench/gpu_env.sh >/dev/null 2>&1
OUT=$OUT/logs/programs SHAPE_S=100 timeout -k 5 230 bash bench/fused/programs_table.sh run .carry/fused3 > $OUT/logs/programs.txt 2>&1
echo "programs_table rc=$? ($SECONDS s)"; head -3 $OUT/logs/programs/programs_bench.err; tail -70 $OUT/logs/programs.txt
cp $OUT/logs/programs/programs_table.json $OUT/ 2>/dev/null
finish
