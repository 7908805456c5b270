/* The decoder's row kernels (coda_decode_ops' embed and gather_rows):
 * the embedding lookup into the fp32 residual rows and the gather of the
 * head's rows into the logits. The linear layers are decode_kernels.cu's. */
#include "backends/cuda/decode_common.cuh"

namespace {

/* x row r = table row tok[r] · scale (Gemma 3's √dim; else 1), plus the
 * position table's row pos[r] where there is one (GPT-2). */
__global__ void embed_kernel(float *x, const bf16 *table, const int32_t *tok, long long M,
                             long long D, float scale, const bf16 *pos_table, const int32_t *pos) {
  pdl_wait();
  const long long n = M * D;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / D, k = i % D;
    float v = __bfloat162float(table[(long long)tok[r] * D + k]) * scale;
    if (pos_table) v += __bfloat162float(pos_table[(long long)pos[r] * D + k]);
    x[i] = v;
  }
}

/* cap: Gemma 3's final logit soft cap, cap · tanh(v / cap) (0: a copy). */
__global__ void gather_kernel(float *dst, const float *src, const int32_t *dst_rows,
                              long long cols, float cap) {
  pdl_wait();
  const long long i = blockIdx.y;
  float *d = dst + (long long)dst_rows[i] * cols;
  const float *s = src + i * cols;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols;
       c += (long long)gridDim.x * blockDim.x)
    d[c] = cap > 0.0f ? cap * tanhf(s[c] / cap) : s[c];
}

} // namespace

extern "C" coda_status coda_cuda_decode_embed(coda_context ctx, float *x, const uint16_t *table,
                                              const int32_t *tok, int64_t M, int64_t D,
                                              float scale, const uint16_t *pos_table,
                                              const int32_t *pos) {
  if (M * D == 0) return CODA_OK;
  return launch(ctx, "embedding", embed_kernel, dim3(grid_of(M * D, 256)), dim3(256), 0, x,
                (const bf16 *)table, tok, (long long)M, (long long)D, scale,
                (const bf16 *)pos_table, pos);
}

extern "C" coda_status coda_cuda_decode_gather_rows(coda_context ctx, float *dst, const float *src,
                                                    const int32_t *dst_rows, int64_t n,
                                                    int64_t cols, float softcap) {
  if (n == 0 || cols == 0) return CODA_OK;
  if (n > 65535)
    return coda_fail(ctx, CODA_ERR_NOT_SUPPORTED, "decode gather: %lld rows", (long long)n);
  const dim3 grid(grid_of(cols, 256) < 64 ? grid_of(cols, 256) : 64, (unsigned)n);
  return launch(ctx, "row gather", gather_kernel, grid, dim3(256), 0, dst, src, dst_rows,
                (long long)cols, softcap);
}
