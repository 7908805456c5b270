"""Table and bar chart of one Transformer block, forward + backward.

From the logs of one device call (bench/block/run_device.sh):

    python3 bench/block/plot_block.py --csv block.csv [--baseline baseline.json]
        [--peak torch_peak.json] [--md block.md] [--png block.png]

block.csv is `coda bench block --csv`; baseline.json is written by the
benchmark environment's baseline_torch.py (PyTorch eager, torch.compile and
the GEMM + SDPA floor for the Llama blocks); torch_peak.json by
torch_peak.py (PyTorch's peak memory, and eager/compile times of the GPT-2
block). Writes a markdown table (times in ms, memory in MiB) and a chart:
top row time per configuration, bottom row peak memory. "Ours" in the
ratios is the tuned plan (coda_plan_tune_fusion) where the log has it,
else the fused plan.

Columns are read by name, so logs of older builds (without tuned_*, fold or
grad_bf16) still parse. Rows of `coda bench block --grad-bf16` (grad_bf16 =
1: the GEMM weights' gradients in bf16, as PyTorch's bf16 block keeps them)
that have a default row of the same config (and fold) give that row a
column "peak MiB (bf16 weight grads)" (their fused peak, else the tuned
one) and a memory bar; without such a row they are rows of their own.
Rows of `coda bench block --inplace` (inplace = 1: the Llama dz written
over the saved z) are rows of their own, marked "in place".

The older form, `plot_block.py RESULTS_MD [OUT_PNG]`, redraws the chart of
bench/results/gpu-2026-11-30.md from its "One Llama-3 block" table.
"""
import argparse
import csv
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, f="{:.3f}"):
    return "-" if v is None else f.format(v)


def load_json(path):
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    return {}


def flag(r, name):
    return (r.get(name) or "0").strip() == "1"


def rows_from_logs(a):
    base, peak = load_json(a.baseline), load_json(a.peak)
    rows = []
    with open(a.csv, encoding="utf-8") as fh:
        # a log may hold several runs (header lines repeated): skip those
        recs = [r for r in csv.DictReader(fh) if r.get("config") and r["config"] != "config"]
    # (config, fold) -> the row of a run with bf16 weight gradients
    def key_of(r):
        return (r["config"], flag(r, "fold"), flag(r, "inplace"), flag(r, "rope_map"))
    grad = {key_of(r): r for r in recs if flag(r, "grad_bf16")}
    plain = {key_of(r) for r in recs if not flag(r, "grad_bf16")}
    for r in recs:
        key = key_of(r)
        own_grad = flag(r, "grad_bf16")
        if own_grad and key in plain:
            continue  # shown as a column of the default row
        g = r if own_grad else grad.get(key)
        t = r["torch_name"]
        b, p = base.get(t, {}), peak.get(t, {})
        extra = ((", folded" if key[1] else "") + (", in place" if key[2] else "")
                 + (", RoPE map" if key[3] else "") + (", bf16 weight grads" if own_grad else ""))
        gpeak = None if g is None else num(g.get("fused_peak_mib")) or num(g.get("tuned_peak_mib"))
        rows.append({
            "name": r["config"] + (" (folded)" if key[1] else "") + (" (in place)" if key[2] else "")
                    + (" (RoPE map)" if key[3] else ""),
            "title": f"{r['config']} ({'GPT-2' if r['arch'] == 'gpt2' else 'Llama'} d {r['d']}, "
                     f"ffn {r['ffn']}, {r['heads']}/{r['kv_heads']} heads, {r['batch']}x{r['seq']}"
                     f"{extra})",
            "fwd": num(r["fused_fwd_ms"]), "bwd": num(r["fused_bwd_ms"]),
            "fb": num(r["fused_fwdbwd_ms"]), "unfused": num(r["unfused_fwdbwd_ms"]),
            "floor": num(r["floor_fwdbwd_ms"]),
            "eager": num(b.get("eager_ms", p.get("eager_ms"))),
            "compiled": num(b.get("compiled_ms", p.get("compiled_ms"))),
            "torch_floor": num(b.get("floor_ms")),
            "peak": num(r["fused_peak_mib"]), "unfused_peak": num(r["unfused_peak_mib"]),
            "device": num(r["device_used_mib"]),
            # tuned = coda_plan_tune_fusion (absent in older logs)
            "tuned": num(r.get("tuned_fwdbwd_ms")),
            "tuned_unfused": num(r.get("tuned_unfused_steps")),
            "tuned_peak": num(r.get("tuned_peak_mib")),
            "eager_peak": num(p.get("eager_peak_mib")),
            "compiled_peak": num(p.get("compiled_peak_mib")),
            # the same plan with bf16 weight gradients (--grad-bf16)
            "grad_peak": gpeak,
        })
    return rows


def write_md(rows, path):
    has_grad = any(r["grad_peak"] is not None for r in rows)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("| config | fused fwd | fused bwd | fused fwd+bwd | unfused fwd+bwd "
                 "| tuned fwd+bwd (unfused steps) | our floor | ours / floor | PyTorch eager "
                 "| torch.compile | PyTorch floor | torch.compile / ours "
                 "| peak MiB fused | unfused | tuned | device used | PyTorch eager peak "
                 "| torch.compile peak |"
                 + (" peak MiB (bf16 weight grads) |" if has_grad else "") + "\n"
                 + "|---" * (19 if has_grad else 18) + "|\n")
        for r in rows:
            best = r["tuned"] or r["fb"]  # ours: the tuned plan where measured
            ratio = best / r["floor"] if best and r["floor"] else None
            vs = r["compiled"] / best if best and r["compiled"] else None
            tuned = fmt(r["tuned"])
            if r["tuned_unfused"] is not None:
                tuned += f" ({r['tuned_unfused']:.0f})"
            fh.write("| " + " | ".join([
                r["title"], fmt(r["fwd"]), fmt(r["bwd"]), fmt(r["fb"]),
                fmt(r["unfused"]), tuned, fmt(r["floor"]), fmt(ratio, "{:.2f}"), fmt(r["eager"]),
                fmt(r["compiled"]), fmt(r["torch_floor"]), fmt(vs, "{:.2f}"),
                fmt(r["peak"], "{:.0f}"), fmt(r["unfused_peak"], "{:.0f}"),
                fmt(r["tuned_peak"], "{:.0f}"), fmt(r["device"], "{:.0f}"),
                fmt(r["eager_peak"], "{:.0f}"), fmt(r["compiled_peak"], "{:.0f}")]
                + ([fmt(r["grad_peak"], "{:.0f}")] if has_grad else [])) + " |\n")
    print("wrote", path)


def bars(ax, vals, colors, unit):
    for i, v in enumerate(vals):
        if v is None:
            continue
        ax.bar(i, v, color=colors[i])
        ax.text(i, v, f"{v:.2f}" if unit == "ms" else f"{v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([])


def plot(rows, path, date):
    tl = ["coda", "coda, fusion off", "coda, fusion tuned per step",
          "coda floor (cuBLAS GEMMs + our attention)", "PyTorch eager",
          "torch.compile", "PyTorch floor (GEMMs + SDPA)"]
    tc = ["#1f5fbf", "#6f8fcf", "#2f9f6f", "#9bb8e8", "#c0504d", "#e39b3b", "#bbbbbb"]
    mc = ["#1f5fbf", "#6f8fcf", "#2f9f6f", "#c0504d", "#e39b3b"]
    has_grad = any(r["grad_peak"] is not None for r in rows)
    if has_grad:  # a memory-only bar: the plan with bf16 weight gradients
        tl.append("coda, bf16 weight grads (memory)")
        tc.append("#17365f")
        mc.insert(3, "#17365f")
    n = len(rows)
    fig, axes = plt.subplots(2, n, figsize=(max(3.2 * n, 9.6), 6.6), squeeze=False)
    for j, r in enumerate(rows):
        bars(axes[0][j], [r["fb"], r["unfused"], r["tuned"], r["floor"], r["eager"], r["compiled"],
                          r["torch_floor"]], tc, "ms")
        axes[0][j].set_title(r["name"], fontsize=9)
        mem = [r["peak"], r["unfused_peak"], r["tuned_peak"], r["eager_peak"], r["compiled_peak"]]
        if has_grad:
            mem.insert(3, r["grad_peak"])
        bars(axes[1][j], mem, mc, "MiB")
    axes[0][0].set_ylabel("fwd+bwd ms (lower is better)")
    axes[1][0].set_ylabel("peak memory MiB (lower is better)")
    # the memory row uses the same colors (no floor bars there)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in tc]
    fig.legend(handles, tl, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"One Transformer block, bf16, forward + backward{date}")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    print("wrote", path)


def legacy(src, dst):
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
            # config, ours fwd, ours bwd, ours fwd+bwd, our floor, eager, compile, torch floor, ratio
            rows.append((f"d {name}", [float(cells[i]) for i in (3, 4, 5, 6, 7)]))
    if not rows:
        sys.exit(f"no block table found in {src}")
    labels = ["coda", "coda floor (cuBLAS GEMMs + our attention)", "PyTorch eager",
              "torch.compile", "PyTorch floor (GEMMs + SDPA)"]
    colors = ["#1f5fbf", "#9bb8e8", "#c0504d", "#e39b3b", "#bbbbbb"]
    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 4), squeeze=False)
    for ax, (name, vals) in zip(axes[0], rows):
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


def main():
    if len(sys.argv) > 1 and sys.argv[1].endswith(".md"):
        legacy(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "bench/results/block-2026-11-30.png")
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", required=True, help="coda bench block --csv output")
    ap.add_argument("--baseline", help="baseline.json of baseline_torch.py")
    ap.add_argument("--peak", help="torch_peak.json of torch_peak.py")
    ap.add_argument("--md", help="markdown table to write")
    ap.add_argument("--png", help="chart to write")
    ap.add_argument("--date", default="", help="appended to the chart title, e.g. ', one H200, 2026-12-01'")
    a = ap.parse_args()
    rows = rows_from_logs(a)
    if not rows:
        sys.exit(f"no rows in {a.csv}")
    if a.md:
        write_md(rows, a.md)
    if a.png:
        plot(rows, a.png, a.date)


if __name__ == "__main__":
    main()
