"""The decode table from a GPU call's logs: every `coda generate --bench`
output (gen-SHAPE-BATCHES-PROMPT[-VARIANT-ROUND].txt) and every
hf_generate.py JSON (hf-*.json) in LOGS, as a Markdown table on stdout and
decode.json beside it (--json FILE).

    python3 bench/generate/table.py LOGS [--json FILE] [--gpu NAME] [--commit SHA]

A row per (system, shape, prompt, batch, variant, round): prefill ms and
tokens/s, step ms, decode tokens/s, the floor (weights + mean cache bytes at
the copy bandwidth the call measured) and the share of it reached; for coda
with --profile, the step's phases against their own floors."""

import argparse
import glob
import json
import os
import re

ROW = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)%\s+(\d+)")
PHASE = re.compile(r"^\s+step by phase: (.+?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)%")


def coda_rows(path):
    name = os.path.basename(path)[4:-4].split("-")
    shape, prompt = name[0], int(name[2])
    variant = name[3] if len(name) > 3 else "default"
    rnd = int(name[4]) if len(name) > 4 else 1
    rows, cur = [], None
    for line in open(path, errors="replace"):
        m = ROW.match(line)
        if m:
            cur = dict(system="coda", shape=shape, prompt=prompt, variant=variant, round=rnd,
                       batch=int(m[1]), prefill_ms=float(m[2]), prefill_tok_s=float(m[3]),
                       step_ms=float(m[4]), decode_tok_s=float(m[5]), floor_ms=float(m[6]),
                       of_floor=int(m[7]) / 100.0, phases=[])
            rows.append(cur)
            continue
        m = PHASE.match(line)
        if m and cur is not None and m[1] != "phase":
            cur["phases"].append(dict(phase=m[1], ms=float(m[2]), mb=float(m[3]),
                                      floor_ms=float(m[4]), of_floor=int(m[5]) / 100.0))
    return rows


def hf_rows(path):
    out = []
    for r in json.load(open(path)):
        out.append(dict(system="hf-" + r["mode"], shape=r["shape"], prompt=r["prompt_len"],
                        variant="default", round=1, batch=r["batch"], prefill_ms=r["prefill_ms"],
                        prefill_tok_s=r["batch"] * r["prompt_len"] / r["prefill_ms"] * 1e3,
                        step_ms=r["step_ms"], decode_tok_s=r["decode_tok_s"], floor_ms=None,
                        of_floor=None, phases=[], torch=r.get("torch"),
                        transformers=r.get("transformers")))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs")
    ap.add_argument("--json")
    ap.add_argument("--gpu", default="")
    ap.add_argument("--commit", default="")
    a = ap.parse_args()
    rows = []
    for p in sorted(glob.glob(os.path.join(a.logs, "gen-*.txt"))):
        rows += coda_rows(p)
    for p in sorted(glob.glob(os.path.join(a.logs, "hf-*.json"))):
        rows += hf_rows(p)
    rows.sort(key=lambda r: (r["shape"], r["prompt"], r["batch"], r["system"], r["variant"], r["round"]))
    bw = ""
    cb = os.path.join(a.logs, "copy_bw.txt")
    if os.path.exists(cb):
        m = re.search(r"([\d.]+) GB/s", open(cb).read())
        bw = m[1] if m else ""
    print("| shape | prompt | batch | system | variant | round | prefill ms | prefill tok/s | "
          "step ms | decode tok/s | floor ms | of floor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        fl = "" if r["floor_ms"] is None else "%.3f" % r["floor_ms"]
        of = "" if r["of_floor"] is None else "%.0f %%" % (100 * r["of_floor"])
        print("| %s | %d | %d | %s | %s | %d | %.2f | %.0f | %.3f | %.1f | %s | %s |" % (
            r["shape"], r["prompt"], r["batch"], r["system"], r["variant"], r["round"],
            r["prefill_ms"], r["prefill_tok_s"], r["step_ms"], r["decode_tok_s"], fl, of))
    if a.json:
        json.dump(dict(gpu=a.gpu, commit=a.commit, copy_gbps=float(bw) if bw else None, rows=rows),
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
