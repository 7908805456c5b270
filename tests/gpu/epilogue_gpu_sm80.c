/* The sm80 stage of the epilogue GPU test (--layouts with CODA_ARCH=sm80,
 * tests/gpu/run_all.sh): the plain GEMM, a map, a converting copy and the
 * attention forward on the sm80 path, against the CPU backend. */
#include "epilogue_gpu_util.h"
#include "api/api.h" /* coda_tensor_copy */

/* The plain GEMM on the sm80 path (a store program in the fused kernel):
 * D = 0.75 A B^T + D in bf16 at a ragged shape with K odd, against the
 * CPU backend and fp64 as run_case compares; returns 1 on a failure. */
int sm80_plain_gemm(coda_context cpu, coda_context gpu) {
  const int64_t M = 97, N = 150, K = 77, ld = 80;
  uint16_t *hA = malloc((size_t)(M * ld) * 2), *hB = malloc((size_t)(N * ld) * 2);
  uint16_t *d0 = malloc((size_t)(M * N) * 2), *dc = malloc((size_t)(M * N) * 2), *dg = malloc((size_t)(M * N) * 2);
  for (int64_t i = 0; i < M * ld; i++) hA[i] = f2bf((float)(nonzero(0) / sqrt((double)K)));
  for (int64_t i = 0; i < N * ld; i++) hB[i] = f2bf((float)nonzero(0));
  for (int64_t i = 0; i < M * N; i++) d0[i] = dc[i] = f2bf((float)nonzero(0));
  void *gA, *gB, *gD;
  dev_alloc(&gA, (size_t)(M * ld) * 2);
  dev_alloc(&gB, (size_t)(N * ld) * 2);
  dev_alloc(&gD, (size_t)(M * N) * 2);
  dev_copy(gA, hA, (size_t)(M * ld) * 2, 1);
  dev_copy(gB, hB, (size_t)(N * ld) * 2, 1);
  dev_copy(gD, d0, (size_t)(M * N) * 2, 1);
  coda_tensor A = {hA, CODA_BF16, M, K, ld}, B = {hB, CODA_BF16, N, K, ld}, D = {dc, CODA_BF16, M, N, N};
  coda_tensor tA = {gA, CODA_BF16, M, K, ld}, tB = {gB, CODA_BF16, N, K, ld}, tD = {gD, CODA_BF16, M, N, N};
  const coda_status sc = coda_gemm(cpu, CODA_N, &A, CODA_T, &B, &D, 0.75f, 1);
  const coda_status sg = coda_gemm(gpu, CODA_N, &tA, CODA_T, &tB, &tD, 0.75f, 1);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(dg, gD, (size_t)(M * N) * 2, 0);
  double eg = 0, ec = 0;
  for (int64_t r = 0; r < M; r++)
    for (int64_t c = 0; c < N; c++) {
      double ref = bf2f(d0[r * N + c]), acc = 0;
      for (int64_t k = 0; k < K; k++) acc += (double)bf2f(hA[r * ld + k]) * bf2f(hB[c * ld + k]);
      ref += 0.75 * acc;
      const double g = bf2f(dg[r * N + c]), cv = bf2f(dc[r * N + c]);
      const double dgi = isnan(g) ? INFINITY : fabs(g - ref), dci = fabs(cv - ref);
      if (dgi > eg) eg = dgi;
      if (dci > ec) ec = dci;
    }
  const int ok = sc == CODA_OK && sg == CODA_OK && eg <= 2 * ec + 1e-6;
  checks++;
  failures += !ok;
  printf("  sm80 path, plain GEMM 97x150x77 bf16 accumulate: gpu err %9.3g  cpu err %9.3g  %s%s%s\n", eg, ec,
         ok ? "ok" : "FAIL", sg ? ": " : "", sg ? coda_last_error(gpu) : "");
  dev_free(gA);
  dev_free(gB);
  dev_free(gD);
  free(hA);
  free(hB);
  free(d0);
  free(dc);
  free(dg);
  return !ok;
}

/* What the sm80 path runs besides the GEMMs, against the CPU backend: a
 * map (coda_map, its kernel over the sm80 fragment), a converting tensor
 * copy (finish.cu) and the attention forward (the mma.sync family; the
 * thorough comparison is test_attention_gpu's); returns 1 on a failure. */
int sm80_rest(coda_context cpu, coda_context gpu) {
  int bad = 0;
  /* the map: y = x * x + 1 (f32) and the row sums of x, 70 x 200 */
  const int64_t M = 70, N = 200;
  uint16_t *hx = malloc((size_t)(M * N) * 2);
  float *yc = calloc((size_t)(M * N), 4), *yg = calloc((size_t)(M * N), 4);
  for (int64_t i = 0; i < M * N; i++) hx[i] = f2bf((float)nonzero(0));
  void *gx, *gy;
  dev_alloc(&gx, (size_t)(M * N) * 2);
  dev_alloc(&gy, (size_t)(M * N) * 4);
  dev_copy(gx, hx, (size_t)(M * N) * 2, 1);
  coda_program pc = NULL, pg = NULL;
  const char *text = "input x : tile bf16\noutput y : f32\nstore y = x * x + 1.0\n";
  coda_status sc = coda_program_parse(cpu, text, &pc), sg = coda_program_parse(gpu, text, &pg);
  coda_args ac = NULL, ag = NULL;
  coda_args_create(cpu, &ac);
  coda_args_create(gpu, &ag);
  coda_tensor x = {hx, CODA_BF16, M, N, N}, y = {yc, CODA_F32, M, N, N};
  coda_tensor tx = {gx, CODA_BF16, M, N, N}, ty = {gy, CODA_F32, M, N, N};
  coda_args_set(ac, "x", &x);
  coda_args_set(ac, "y", &y);
  coda_args_set(ag, "x", &tx);
  coda_args_set(ag, "y", &ty);
  if (sc == CODA_OK) sc = coda_map(cpu, pc, M, N, ac, (coda_tiling){64, 128});
  if (sg == CODA_OK) sg = coda_map(gpu, pg, M, N, ag, (coda_tiling){64, 128});
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(yg, gy, (size_t)(M * N) * 4, 0);
  double em = 0;
  for (int64_t i = 0; i < M * N; i++) {
    const double d = fabs((double)yg[i] - yc[i]);
    if (!(d <= em)) em = isnan(d) ? INFINITY : d;
  }
  int ok = sc == CODA_OK && sg == CODA_OK && em <= 1e-5;
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, map 70x200 (y = x*x + 1): max |gpu - cpu| %9.3g  %s%s%s\n", em,
         ok ? "ok" : "FAIL", sg ? ": " : "", sg ? coda_last_error(gpu) : "");
  /* the copy: the bf16 x converted to f32 on the device */
  sg = coda_tensor_copy(gpu, &ty, &tx);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(yg, gy, (size_t)(M * N) * 4, 0);
  ok = sg == CODA_OK;
  for (int64_t i = 0; ok && i < M * N; i++) ok = yg[i] == bf2f(hx[i]);
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, tensor copy bf16 -> f32: %s%s%s\n", ok ? "ok" : "FAIL", sg ? ": " : "",
         sg ? coda_last_error(gpu) : "");
  coda_args_destroy(ac);
  coda_args_destroy(ag);
  coda_program_destroy(pc);
  coda_program_destroy(pg);
  dev_free(gx);
  dev_free(gy);
  free(hx);
  free(yc);
  free(yg);
  /* the attention forward: batch 2 of 50 tokens, 4 query heads over 2 KV
   * heads of 64 */
  const int B = 2, T = 50, Hq = 4, Hkv = 2, hd = 64;
  const int64_t BT = (int64_t)B * T, cq = (int64_t)(Hq + 2 * Hkv) * hd, co = (int64_t)Hq * hd;
  uint16_t *hq = malloc((size_t)(BT * cq) * 2), *oc = malloc((size_t)(BT * co) * 2),
           *og = malloc((size_t)(BT * co) * 2);
  float *lc = malloc((size_t)(BT * Hq) * 4), *lg = malloc((size_t)(BT * Hq) * 4);
  for (int64_t i = 0; i < BT * cq; i++) hq[i] = f2bf((float)nonzero(0));
  void *gq, *go, *gl;
  dev_alloc(&gq, (size_t)(BT * cq) * 2);
  dev_alloc(&go, (size_t)(BT * co) * 2);
  dev_alloc(&gl, (size_t)(BT * Hq) * 4);
  dev_copy(gq, hq, (size_t)(BT * cq) * 2, 1);
  coda_tensor q = {hq, CODA_BF16, BT, cq, cq}, o = {oc, CODA_BF16, BT, co, co},
              l = {lc, CODA_F32, BT, Hq, Hq};
  coda_tensor tq = {gq, CODA_BF16, BT, cq, cq}, to = {go, CODA_BF16, BT, co, co},
              tl = {gl, CODA_F32, BT, Hq, Hq};
  sc = coda_attention_forward(cpu, &q, B, T, Hq, Hkv, hd, &o, &l);
  sg = coda_attention_forward(gpu, &tq, B, T, Hq, Hkv, hd, &to, &tl);
  if (sg == CODA_OK) CUDA_CHECK(cudaDeviceSynchronize());
  dev_copy(og, go, (size_t)(BT * co) * 2, 0);
  dev_copy(lg, gl, (size_t)(BT * Hq) * 4, 0);
  double eo = 0, el = 0;
  for (int64_t i = 0; i < BT * co; i++) {
    const double d = fabs((double)bf2f(og[i]) - bf2f(oc[i]));
    if (!(d <= eo)) eo = isnan(d) ? INFINITY : d;
  }
  for (int64_t i = 0; i < BT * Hq; i++) {
    const double d = fabs((double)lg[i] - lc[i]);
    if (!(d <= el)) el = isnan(d) ? INFINITY : d;
  }
  /* bf16 outputs of averages of values in (-1, 1): a few units of 2^-8 */
  ok = sc == CODA_OK && sg == CODA_OK && eo <= 2e-2 && el <= 1e-3;
  checks++;
  failures += !ok;
  bad |= !ok;
  printf("  sm80 path, attention forward 2x50, 4/2 heads of 64: max |gpu - cpu| out %9.3g  "
         "lse %9.3g  %s%s%s\n", eo, el, ok ? "ok" : "FAIL", sg ? ": " : "",
         sg ? coda_last_error(gpu) : "");
  dev_free(gq);
  dev_free(go);
  dev_free(gl);
  free(hq);
  free(oc);
  free(og);
  free(lc);
  free(lg);
  return bad;
}

