"""What the PyTorch-side fused-GEMM benchmarks share (quack_fused.py,
coda_ref_fused.py): bench_fused's shapes, CUDA-event timing and its random
inputs. Imported from the scripts' own folder; torch is imported where used, so
the shapes load without it (coda_ref_fused.py --dry)."""
import time

# bench_fused's "1B" and "8B" shapes (bench/fused/bench_fused.c)
SHAPES = {
    "1B": dict(M=16384, D=2048, F=8192, hq=32, hkv=8, hd=64, V=32768, seq=4096),
    "8B": dict(M=8192, D=4096, F=14336, hq=32, hkv=8, hd=128, V=32768, seq=4096),
}


def timed(fn, reps):
    """Median ms of fn() over reps calls after 3 warm-ups (first call timed apart)."""
    import torch
    t0 = time.time()
    fn()
    torch.cuda.synchronize()
    first = time.time() - t0
    for _ in range(2):
        fn()
    e0 = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    e1 = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        e0[i].record()
        fn()
        e1[i].record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in zip(e0, e1))
    n = len(ts)
    med = ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])
    return med, first


def rnd(*shape, scale=1.0, positive=False):
    """Values +-scale*[0.1, 1), never zero (as bench_fused)."""
    import torch
    m = torch.rand(*shape, device="cuda") * 0.9 + 0.1
    if not positive:
        m = torch.where(torch.rand(*shape, device="cuda") < 0.5, -m, m)
    return (m * scale).to(torch.bfloat16)
