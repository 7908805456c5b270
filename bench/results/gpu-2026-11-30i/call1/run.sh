#!/bin/bash
# Fused dK/dV/dQ attention backward: correctness of every variant, timings, SDPA in the same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a1/b; tar -xzf .carry/a1/b.tgz -C .carry/a1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $L/gpu.txt
timeout 150 $B/test_attention_gpu > $L/test.log 2>&1; echo "test rc=$?"; grep -i -E "fail|passed|ok " $L/test.log | tail -5
timeout 150 $B/bench_attention > $L/bench.md 2>&1; echo "bench rc=$?"
timeout 100 $B/bench_attention 3 > $L/bench-8b-b.md 2>&1
timeout 120 python3 $B/sdpa.py $L/bench.md > $L/sdpa.md 2>&1; echo "sdpa rc=$?"
timeout 60 python3 - > $L/sdpa-kernels.txt 2>&1 <<'PY'
import torch, torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
B,T,Hq,Hkv,hd=2,4096,32,8,128
q=torch.randn(B,Hq,T,hd,device='cuda',dtype=torch.bfloat16,requires_grad=True)
k=torch.randn(B,Hkv,T,hd,device='cuda',dtype=torch.bfloat16,requires_grad=True)
v=torch.randn(B,Hkv,T,hd,device='cuda',dtype=torch.bfloat16,requires_grad=True)
for _ in range(3):
    F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True).sum().backward()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=True).sum().backward()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
print("cudnn sdp enabled:", torch.backends.cuda.cudnn_sdp_enabled(), "flash:", torch.backends.cuda.flash_sdp_enabled())
PY
grep -h "^CODA|" $L/bench*.md
cat $L/sdpa.md | tail -12
grep -E "cudnn|flash|fmha|sdpa" -i $L/sdpa-kernels.txt | head -8
tar -czf $O/logs.tgz -C $O logs
