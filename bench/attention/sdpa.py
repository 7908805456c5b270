"""PyTorch baseline for the attention benchmark: scaled_dot_product_attention
(causal, grouped-query heads) on views of a packed qkv tensor, at the same
shapes as bench_attention. CUDA events, 5 warm-up runs, median of 25."""
import torch
import torch.nn.functional as F

SHAPES = [
    ("d512 8h hd64 B16 T1024", 16, 1024, 8, 8, 64),
    ("d2048 32q/8kv hd64 B4 T2048", 4, 2048, 32, 8, 64),
    ("d4096 32q/8kv hd128 B2 T4096", 2, 4096, 32, 8, 128),
]


def median_ms(fn, warm=5, reps=25):
    times = []
    for r in range(warm + reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if r >= warm:
            times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print("| shape | sdpa fwd ms | sdpa fwd+bwd ms |")
    print("|---|---|---|")
    for name, B, T, Hq, Hkv, hd in SHAPES:
        qkv = (torch.rand(B, T, Hq + 2 * Hkv, hd, device="cuda") * 3 - 1.5).to(torch.bfloat16)
        qkv.requires_grad_(True)
        dout = (torch.rand(B, Hq, T, hd, device="cuda") * 2 - 1).to(torch.bfloat16)

        def split():
            q = qkv[:, :, :Hq].transpose(1, 2)
            k = qkv[:, :, Hq:Hq + Hkv].transpose(1, 2)
            v = qkv[:, :, Hq + Hkv:].transpose(1, 2)
            return q, k, v

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(*split(), is_causal=True, enable_gqa=True)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(*split(), is_causal=True, enable_gqa=True)
            o.backward(dout)
            qkv.grad = None

        print(f"| {name} | {median_ms(fwd):.3f} | {median_ms(fwd_bwd):.3f} |", flush=True)


if __name__ == "__main__":
    main()
