"""PyTorch SDPA beside coda's cuDNN path: causal GQA forward and
forward+backward with SDPA's backend forced (cuDNN attention, flash) on
views of a packed qkv, at the shapes of bench_cudnn (its CUDNN|... lines,
read from the file given), CUDA events, 3 warm-up runs, median of 15.
Prints one markdown table of every row (coda own, coda cudnn, coda
cudnn-nondet, SDPA cudnn, SDPA flash) and writes it as JSON too.
    sdpa_cudnn.py bench_cudnn.md out.json"""
import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa import time_shape  # the attention benchmark's SDPA timing (this folder)


def coda_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("CUDNN|"):
                v = line.strip().split("|")[1:]
                rows.append({"shape": v[0], "B": int(v[1]), "T": int(v[2]), "Hq": int(v[3]),
                             "Hkv": int(v[4]), "hd": int(v[5]), "impl": "coda " + v[6],
                             "fwd_ms": float(v[7]), "bwd_ms": float(v[8]),
                             "fwd_bwd_ms": float(v[9])})
    return rows


def sdpa(shape, backend):
    with sdpa_kernel([backend]):
        return time_shape(*shape, 3, 15)


def main():
    rows = coda_rows(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else None
    shapes = []
    for r in rows:
        key = (r["shape"], r["B"], r["T"], r["Hq"], r["Hkv"], r["hd"])
        if key not in shapes:
            shapes.append(key)
    allrows = []
    for key in shapes:
        allrows += [r for r in rows if r["shape"] == key[0]]
        for name, be in (("SDPA cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("SDPA flash", SDPBackend.FLASH_ATTENTION)):
            try:
                f, fb = sdpa(key[1:], be)
                allrows.append({"shape": key[0], "B": key[1], "T": key[2], "Hq": key[3],
                                "Hkv": key[4], "hd": key[5], "impl": name, "fwd_ms": f,
                                "bwd_ms": fb - f, "fwd_bwd_ms": fb})
            except RuntimeError as e:
                print(f"{key[0]} {name}: {str(e).splitlines()[0]}", file=sys.stderr)
    cudnn_ver = torch.backends.cudnn.version()
    print(f"torch {torch.__version__}, cuDNN (torch) {cudnn_ver}, {torch.cuda.get_device_name(0)}")
    print()
    print("| shape | implementation | fwd ms | bwd ms | fwd+bwd ms |")
    print("|---|---|---|---|---|")
    for r in allrows:
        print(f"| {r['shape']} | {r['impl']} | {r['fwd_ms']:.3f} | {r['bwd_ms']:.3f} | "
              f"{r['fwd_bwd_ms']:.3f} |")
    if out:
        with open(out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "torch_cudnn": cudnn_ver, "rows": allrows}, f, indent=1)


if __name__ == "__main__":
    main()
