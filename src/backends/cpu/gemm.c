/* Blocked, packed, register-tiled GEMM of the CPU backend.
 *
 * A tile of the output is computed with full K: panels of op(A) and op(B)
 * (KC deep) are converted to the compute type and packed into MR-row and
 * NR-column slivers, then a micro-kernel keeps an MR x NR block of the
 * accumulator in vector registers. Callers parallelize over output tiles;
 * every element is summed over k in order, so results do not depend on the
 * tiling or the number of threads. */
#include "backends/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define CPU_X86 1
#else
#define CPU_X86 0
#endif

#define CPU_MR 6
#define CPU_NV 2
#define CPU_KC 256

#define REAL float
#define SFX f32
#include "backends/cpu/gemm_impl.h"
#undef REAL
#undef SFX

#define REAL double
#define SFX f64
#include "backends/cpu/gemm_impl.h"
#undef REAL
#undef SFX

/* 2: AVX-512, 1: AVX2+FMA, 0: portable vectors (SSE2 on x86-64). */
static int cpu_isa(void) {
#if CPU_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

const char *cpu_gemm_isa_name(void) {
  static const char *names[] = {"generic", "avx2", "avx512"};
  return names[cpu_isa()];
}

int cpu_gemm_ws_init(cpu_gemm_ws *w, int f64, int tile_m, int tile_n) {
  memset(w, 0, sizeof *w);
  w->f64 = f64;
  w->isa = cpu_isa();
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int vw = (w->isa == 2 ? 64 : w->isa == 1 ? 32 : 16) / (int)es;
  w->mr = CPU_MR;
  w->nr = CPU_NV * vw;
  w->tile_m = tile_m;
  w->tile_n = tile_n;
  int pm = (tile_m + w->mr - 1) / w->mr * w->mr;
  int pn = (tile_n + w->nr - 1) / w->nr * w->nr;
  w->ldacc = pn;
  w->acc = aligned_alloc(64, ((size_t)pm * pn * es + 63) / 64 * 64);
  w->pa = aligned_alloc(64, ((size_t)pm * CPU_KC * es + 63) / 64 * 64);
  w->pb = aligned_alloc(64, ((size_t)pn * CPU_KC * es + 63) / 64 * 64);
  if (!w->acc || !w->pa || !w->pb) {
    cpu_gemm_ws_free(w);
    return 0;
  }
  return 1;
}

void cpu_gemm_ws_free(cpu_gemm_ws *w) {
  free(w->acc);
  free(w->pa);
  free(w->pb);
  w->acc = w->pa = w->pb = NULL;
}

void cpu_gemm_tile(const cpu_gemm_desc *g, cpu_gemm_ws *w, int64_t r0, int mt,
                   int64_t c0, int nt) {
  if (w->f64) gemm_tile_f64(g, w, r0, mt, c0, nt);
  else gemm_tile_f32(g, w, r0, mt, c0, nt);
}
