#!/bin/bash
# The training benchmark (bench/train/run.sh) with the peers in the same
# call: coda train --device gpu at d512 and 1.1 B, PyTorch eager,
# torch.compile bf16 and fp32 master + autocast (train_torch2.py), and HF +
# Liger kernels (peers_train.py, liger-kernel 0.8.5 wheel).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$L/gpu.txt"
OUT=$L bench/train/run.sh "$P" .carry/peers .whl
