"""Bar chart of one Llama-3 block, forward + backward, from the table in
bench/results/gpu-2026-11-30.md (ours, our floor, PyTorch eager,
torch.compile, PyTorch floor; all measured in the same call).

    python3 bench/block/plot_block.py [RESULTS_MD] [OUT_PNG]
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu-2026-11-30.md"
dst = sys.argv[2] if len(sys.argv) > 2 else "bench/results/block-2026-11-30.png"
rows = []
in_table = False
for line in open(src, encoding="utf-8"):
    if line.startswith("## One Llama-3 block"):
        in_table = True
        continue
    if in_table and line.startswith("## "):
        break
    if in_table and line.startswith("| d "):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.match(r"d (\d+)", cells[0]).group(1)
        # columns: config, ours fwd, ours bwd, ours fwd+bwd, our floor, eager, compile, torch floor, ratio
        rows.append((f"d {name}", [float(cells[i]) for i in (3, 4, 5, 6, 7)]))
if not rows:
    sys.exit(f"no block table found in {src}")
labels = ["coda", "coda floor (cuBLAS GEMMs + our attention)", "PyTorch eager",
          "torch.compile", "PyTorch floor (GEMMs + SDPA)"]
colors = ["#1f5fbf", "#9bb8e8", "#c0504d", "#e39b3b", "#bbbbbb"]
fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 4))
for ax, (name, vals) in zip(axes, rows):
    ax.bar(range(len(vals)), vals, color=colors)
    ax.set_title(f"{name}: block fwd+bwd")
    ax.set_ylabel("ms (lower is better)")
    ax.set_xticks([])
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
fig.legend([plt.Rectangle((0, 0), 1, 1, color=c) for c in colors], labels,
           loc="lower center", ncol=3, fontsize=8)
fig.suptitle("One Llama-3 block, bf16, one H200 (2026-11-30, same call)")
fig.tight_layout(rect=(0, 0.1, 1, 0.95))
fig.savefig(dst, dpi=110)
print("wrote", dst)
