/* Epilogue programs shared by the code-generation test (tests/test_epi_codegen.c,
 * compile only) and the GPU differential test (tests/gpu/test_epilogue_gpu.c):
 * together they use every pairwise op, every reduction kind, every tile width
 * and the segment sizes around the tile width. */
#ifndef CODA_TEST_EPI_PROGRAMS_H
#define CODA_TEST_EPI_PROGRAMS_H

/* Pair mode: the two-result ops (rope, rope_bwd, dswiglu, dgeglu), half-width
 * input and accumulated output, row reductions and segments of 2..256. */
#define EPI_TEST_PAIR_OPS \
     "mode pair\n" \
     "input t : tile bf16\n" \
     "input h : tile f16 half\n" \
     "input c : col f32\n" \
     "input p : row i32\n" \
     "output o : bf16\n" \
     "output oh : f32 half accumulate\n" \
     "output of : f16\n" \
     "x, y = rope(acc.even, acc.odd, p, c.even, c.odd)\n" \
     "u, v = rope_bwd(x, t.odd, p, c.even, c.odd)\n" \
     "dg, du = dswiglu(x, y, t.even)\n" \
     "eg, eu = dgeglu(u, v, h)\n" \
     "store o = pack(dg + eg, du + eu)\n" \
     "store oh = x * y\n" \
     "store of = pack(u, v)\n" \
     "reduce rs = rowsum(x)\n" \
     "reduce rm = rowmax(y)\n" \
     "reduce rl = rowlse(u)\n" \
     "reduce s2 = rowsum(v) per 2\n" \
     "reduce s4 = rowsum(v) per 4\n" \
     "reduce s64 = rowsum(u) per 64\n" \
     "reduce s256 = rowsum(u) per 256\n"

/* Elem mode: packed-pair (x2) input and output, colsum, rowpick and the other
 * reductions. */
#define EPI_TEST_ELEM_REDUCE_X2 \
     "input z : tile bf16 x2\n" \
     "input w : tile f16 x2\n" \
     "input idx : row i32\n" \
     "output o : f16 x2\n" \
     "output q : bf16 x2 accumulate\n" \
     "g = z.even * w.odd\n" \
     "u = z.odd + w.even\n" \
     "store o = pack(g * acc, u)\n" \
     "store q = pack(u, g)\n" \
     "reduce a = rowsum(g)\n" \
     "reduce b = rowmax(u)\n" \
     "reduce l = rowlse(acc)\n" \
     "reduce cs = colsum(g)\n" \
     "reduce cs2 = colsum(u * acc)\n" \
     "reduce s1 = rowsum(g) per 1\n" \
     "reduce s8 = rowsum(u) per 8\n" \
     "reduce s16 = rowsum(u) per 16\n" \
     "reduce pk = rowpick(acc, idx)\n"

/* Accumulated f32 outputs (staged; TMA reduce-add where the view allows):
 * alone with a row input (every tile access staged), and in pair mode next
 * to a 16-bit accumulated output (which stays a direct read-add-write) and
 * a stored one. */
#define EPI_TEST_ACC_F32 \
     "input r : row f32\n" \
     "input s : scalar f32\n" \
     "output y : f32 accumulate\n" \
     "store y = acc * r + s\n"

/* rowsum inputs (M x T partials summed per row) and row-invariant math
 * hoisted out of the fragment loops: r depends only on rowsum, scalar and
 * row inputs and the builtin row, so the rsqrt runs once per fragment row;
 * y reads it per point. The pair-mode twin also rotates with a row
 * position. */
#define EPI_TEST_ROWSUM_HOIST \
     "input ss : rowsum f32\n" \
     "input mu : rowsum f32\n" \
     "input inv_n : scalar f32\n" \
     "input g : row f32\n" \
     "input w : col bf16\n" \
     "output y : bf16\n" \
     "m = mu * inv_n\n" \
     "r = rsqrt(ss * inv_n + m * m + 0.00001) * g + row * 0.0001\n" \
     "store y = (acc - m) * r * w\n" \
     "reduce q = rowsum(acc * r)\n"

/* rowmax and rowlse inputs: each row's partials combined as the max and
 * lse finishers do, in the prelude, then read per point. */
#define EPI_TEST_ROW_MAXLSE \
     "input pm : rowmax f32\n" \
     "input pl : rowlse f32\n" \
     "input w : col bf16\n" \
     "output y : bf16\n" \
     "store y = (acc - pl) * w + exp(acc - pm)\n" \
     "reduce q = rowsum(acc - pm)\n"

#define EPI_TEST_ROWSUM_PAIR \
     "mode pair\n" \
     "input ss : rowsum f32\n" \
     "input inv_n : scalar f32\n" \
     "input pos : row i32\n" \
     "input fr : col f32\n" \
     "output y : bf16\n" \
     "r = rsqrt(ss * inv_n + 0.00001)\n" \
     "x, z = rope(acc.even * r, acc.odd * r, pos, fr.even, fr.odd)\n" \
     "store y = pack(x, z)\n"

#define EPI_TEST_ACC_F32_PAIR \
     "mode pair\n" \
     "input t : tile bf16\n" \
     "output y : f32 accumulate\n" \
     "output z : bf16 accumulate\n" \
     "output w : bf16\n" \
     "store y = pack(acc.even * t.even, acc.odd - t.odd)\n" \
     "store z = pack(acc.odd, acc.even)\n" \
     "store w = pack(acc.even + t.odd, t.even)\n"

/* The functions of the second round (erf, relu, pow, round_bf16,
 * round_f16); the rounded values depend only on inputs, so both backends
 * round the same fp32 numbers. */
#define EPI_TEST_ROUND2_OPS \
     "input t : tile f32\n" \
     "input c : col f32\n" \
     "output y : f32\n" \
     "output z : bf16\n" \
     "a = erf(acc) + relu(acc - 0.25) * pow(abs(t) + 0.5, acc * 0.5) + pow(abs(c) + 1, 2)\n" \
     "store y = round_bf16(t * 3) + round_f16(c - t) + a\n" \
     "store z = relu(-acc) + erf(t)\n"

/* Index built-ins (issue 39): seg/segpos, idiv/imod (floor) of row, col and
 * an i32 column input, integer values used as numbers, a segmented rowsum
 * that keeps half of each 16 columns; and the same indices in half-split
 * pairs, where col is the pair's first column. */
#define EPI_TEST_INDEX_ELEM \
     "input ci : col i32\n" \
     "input t : tile bf16\n" \
     "output o : bf16\n" \
     "k = idiv(col - 3, 5) + imod(row * 7 - col, -4) + imod(ci, 3)\n" \
     "store o = acc * select(segpos(64) == 0, 2, 1) + seg(64) * 0.5 + k * 0.125 + t\n" \
     "reduce p = rowsum(select(segpos(16) < 8, acc, 0)) per 64\n"
#define EPI_TEST_INDEX_SPLIT \
     "mode pair split 64\n" \
     "output o : bf16\n" \
     "store o = pack(acc.even * (imod(seg(64), 4) + 1), acc.odd * idiv(segpos(64), 8))\n"

/* Half-split pairs (columns k and k + S/2 of each S-column segment, as
 * Hugging Face Llama's q/k heads rotate): a head-size segment of 64 (a
 * point's two column pairs 32 columns apart, in different 32-column chunks)
 * with full, half and column operands through both lanes, packed, half and
 * accumulated outputs, row partials, segmented sums and maxima; and the
 * narrowest segment, 16 (the second pair is the next one). */
#define EPI_TEST_SPLIT64 \
     "mode pair split 64\n" \
     "input t : tile bf16\n" \
     "input h : tile f16 half\n" \
     "input c : col f32\n" \
     "input p : row i32\n" \
     "output o : bf16\n" \
     "output oh : f32 half\n" \
     "output of : f16 accumulate\n" \
     "x, y = rope(acc.even, acc.odd, p, c.even * 0.01, c.odd * 0.0001)\n" \
     "store o = pack(x + t.odd, y * t.even)\n" \
     "store oh = x * y + h\n" \
     "store of = pack(x - col * 0.001, y)\n" \
     "reduce rs = rowsum(x)\n" \
     "reduce rm = rowmax(y)\n" \
     "reduce rl = rowlse(x * y)\n" \
     "reduce s8 = rowmax(x) per 8\n" \
     "reduce s32 = rowsum(y) per 32\n" \
     "reduce m64 = rowmax(x * y) per 64\n" \
     "reduce s256 = rowsum(x) per 256\n"

#define EPI_TEST_SPLIT16 \
     "mode pair split 16\n" \
     "input w : col bf16\n" \
     "output g : bf16 half\n" \
     "output u : f32\n" \
     "store g = swiglu(acc.even, acc.odd) * w.odd\n" \
     "store u = pack(acc.even * w.even, acc.odd)\n" \
     "reduce q = rowsum(acc.even * acc.odd) per 16\n" \
     "reduce m = rowmax(acc.odd) per 128\n"

/* Column maxima beside column sums, and row maxima per segment of 1 to 256
 * columns (elem mode), and of 2 and 4 in pair mode. */
#define EPI_TEST_MAXIMA \
     "input t : tile bf16\n" \
     "output y : bf16\n" \
     "v = acc * t\n" \
     "store y = v\n" \
     "reduce cm = colmax(v)\n" \
     "reduce cs = colsum(v)\n" \
     "reduce cn = colmax(-acc)\n" \
     "reduce m1 = rowmax(v) per 1\n" \
     "reduce m2 = rowmax(v) per 2\n" \
     "reduce m4 = rowmax(acc) per 4\n" \
     "reduce m16 = rowmax(v) per 16\n" \
     "reduce m256 = rowmax(t) per 256\n"

#define EPI_TEST_PAIR_SEGMAX \
     "mode pair\n" \
     "output o : bf16 half\n" \
     "store o = acc.even - acc.odd\n" \
     "reduce a = rowmax(acc.odd) per 2\n" \
     "reduce b = rowmax(acc.even) per 4\n" \
     "reduce c = rowmax(acc.even * acc.odd) per 64\n"

/* `math fast` (contraction, approximate tanh, exp, log, division and square
 * root on the GPU): every function the approximations reach, into a 16-bit
 * output; exp, log, division and roots also into an f32 output and row and
 * column sums (tanh, the coarsest, only into the 16-bit output). */
#define EPI_TEST_FAST_OPS \
     "math fast\n" \
     "input t : tile bf16\n" \
     "input r : row f32\n" \
     "output o1 : bf16\n" \
     "output o2 : f32\n" \
     "a = acc * r + t\n" \
     "b = tanh(a) + gelu(a) + dgelu(t) + geglu(a, t)\n" \
     "d = exp(-abs(a)) + log(abs(a) + 1) + sigmoid(a) + silu(t) + dsilu(a) + a / (abs(t) + 1) + sqrt(abs(a)) + rsqrt(abs(a) + 1)\n" \
     "store o1 = b * acc + d\n" \
     "store o2 = d\n" \
     "reduce rs = rowsum(d)\n" \
     "reduce cs = colsum(d * t)\n"

/* `math fast` in pair mode: the two-result SwiGLU and GeGLU backwards. */
#define EPI_TEST_FAST_PAIR \
     "mode pair\n" \
     "math fast\n" \
     "input t : tile bf16\n" \
     "output o : bf16\n" \
     "dg, du = dswiglu(acc.even, acc.odd, t.even)\n" \
     "eg, eu = dgeglu(acc.odd, t.odd, acc.even)\n" \
     "store o = pack(dg + eg + swiglu(acc.even, t.odd), du - eu)\n"

#endif
