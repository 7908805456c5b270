/* What a grid barrier costs on this GPU, for the one-kernel decode step
 * (src/backends/cuda/decode_row_step.cu): one block an SM of 288 threads,
 * as that kernel, passing N barriers back to back; microseconds a barrier
 * for each variant, the median of 7 launches.
 *   gen:      the arrivals word reset by the last block, which bumps a
 *             generation word the others wait on (sleeping 32 ns a poll)
 *   count:    a count that only grows, the blocks polling it until it
 *             reaches their target (no sleep)
 *   count-ns: the same, sleeping 32 ns a poll
 * Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a grid_sync.cu -o grid_sync */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int MODE>
__global__ void __launch_bounds__(288, 1) bars(unsigned *sync, int n) {
  if (threadIdx.x >= 256) return;
  for (int k = 0; k < n; k++) {
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (threadIdx.x == 0) {
      if (MODE == 0) {
        const unsigned gen = ld_acquire(sync + 1);
        __threadfence();
        if (atomicAdd(sync, 1u) == gridDim.x - 1) {
          atomicExch(sync, 0u);
          __threadfence();
          atomicAdd(sync + 1, 1u);
        } else {
          while (ld_acquire(sync + 1) == gen) __nanosleep(32);
        }
      } else {
        const unsigned target = (unsigned)(k + 1) * gridDim.x;
        __threadfence();
        atomicAdd(sync, 1u);
        while (ld_acquire(sync) < target)
          if (MODE == 2) __nanosleep(32);
      }
      __threadfence();
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned *sync;
  cudaMalloc(&sync, 8);
  const int n = 2000;
  const char *names[3] = {"gen", "count", "count-ns"};
  void (*k[3])(unsigned *, int) = {bars<0>, bars<1>, bars<2>};
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  printf("grid barrier, %d blocks of 288 threads, %d barriers a launch\n", sms, n);
  for (int v = 0; v < 3; v++) {
    std::vector<float> t;
    for (int r = 0; r < 8; r++) {
      cudaMemset(sync, 0, 8);
      void *args[2] = {&sync, (void *)&n};
      cudaEventRecord(a);
      cudaLaunchCooperativeKernel((void *)k[v], sms, 288, args, 0, 0);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (r) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    printf("%-9s %.3f us a barrier (launches: %s)\n", names[v], t[t.size() / 2] * 1e3 / n,
           cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
