"""The training benchmark's table (bench/train/run.sh): coda's runs from
their step lines (and, with --profile, their per-phase table), the peers'
from their JSON lines. Prints markdown; writes train.json beside it.

    python3 bench/train/table.py LOG_DIR [--json PATH]

LOG_DIR as run.sh writes it: runs.tsv (one line per run), meta.tsv (GPU,
date, commit, command), coda-*.txt, torch*.log, peers*.log. Directories of
older calls (no runs.tsv: coda-SHAPE.txt, coda-walls.txt) read too."""
import glob
import json
import os
import re
import statistics
import sys

FLOPS_PEAK = 989e12
SKIP = 3  # coda's untimed steps (run.sh: the first 3 of every run)
SHAPE_ORDER = ("1b", "d512", "1b-8k")
SHAPE_ALIAS = {"1b8k": "1b-8k"}
# tokens per step by shape, for logs without coda's `data:` line
SHAPE_TOKENS = {"d512": 16 * 1024, "1b": 4 * 2048, "1b-8k": 4 * 8192}
PEER_NAMES = {
    "eager": "PyTorch eager",
    "compile": "torch.compile bf16",
    "compile_amp": "torch.compile fp32 master + autocast",
    "liger": "HF + Liger",
    "liger_compile": "HF + Liger + torch.compile",
    "coda_patch": "HF + coda.torch patch",
}


def read_tsv(path):
    try:
        with open(path) as f:
            return [l.rstrip("\n").split("\t") for l in f if l.strip()]
    except OSError:
        return []


def field(line, name):
    m = re.search(r"(?:^|\s)" + re.escape(name) + r"\s+([\d.]+)", line)
    return float(m.group(1)) if m else None


def median(xs):
    return statistics.median(xs) if xs else None


def parse_profile(text):
    """coda train --profile's table: {steps, warmup, step_ms, clock, phases:
    {name: ms}, floor_ms: {name: ms}, block_ms: {name: [mean, max]}}."""
    m = re.search(r"^profile: (\d+) steps after (\d+) warm-up, ([\d.]+) ms per step \((.*)\)$",
                  text, re.M)
    if not m:
        return None
    prof = {"steps": int(m.group(1)), "warmup": int(m.group(2)), "step_ms": float(m.group(3)),
            "clock": m.group(4), "phases": {}, "floor_ms": {}, "block_ms": {}}
    row = re.compile(r"^  (\S.*?)\s+(-?[\d.]+)\s+(-?[\d.]+)%(?:\s+([\d.]+))?"
                     r"(?:\s+([\d.]+) / ([\d.]+))?\s*$")
    for line in text[m.end():].splitlines()[1:]:
        if not line.startswith("  "):
            break
        r = row.match(line)
        if not r or r.group(1) == "phase":
            continue
        name = r.group(1)
        if name == "step (wall)":
            continue
        prof["phases"][name] = float(r.group(2))
        if r.group(4):
            prof["floor_ms"][name] = float(r.group(4))
        if r.group(5):
            prof["block_ms"][name] = [float(r.group(5)), float(r.group(6))]
    return prof


def parse_coda(text):
    """One coda train log: the median timed step and the rest, or None
    when no step ran."""
    steps = [l for l in text.splitlines() if l.startswith("step ") and "ms/step" in l]
    timed = [l for l in steps if (field(l, "step") or 0) > SKIP]
    ms = [field(l, "ms/step") for l in timed if field(l, "ms/step")]
    if not ms:
        return None
    mfu = [field(l, "mfu") for l in timed if field(l, "mfu") is not None]
    mem = [field(l, "dev_mem") for l in steps if field(l, "dev_mem")]
    # the upper median, as the published tables have it
    r = {"ms_per_step": statistics.median_high(ms), "steps_timed": len(ms),
         "mfu": median(mfu) / 100 if mfu else None,
         "peak_mem_gib": max(mem) / 1024 if mem else None}
    # tokens per step: the trainer's own count, else batch x seq x accum
    t = re.search(r"\((\d+) tokens/step\)", text)
    b = re.search(r"batch (\d+) x (\d+), accum (\d+)", text)
    if t:
        r["tokens_per_step"] = int(t.group(1))
    elif b:
        r["tokens_per_step"] = int(b.group(1)) * int(b.group(2)) * int(b.group(3))
    # the trainer's own count (set-up + first step; checkpoint saves apart)
    t = re.search(r"first step done ([\d.]+) s .*?; (\d+) checkpoint saves? ([\d.]+) s", text)
    if t:
        r["first_step_s"] = float(t.group(1))
        r["checkpoint_save_s"] = float(t.group(3)) / max(int(t.group(2)), 1)
    prof = parse_profile(text)
    if prof:
        r["profile"] = prof
    return r


def coda_runs(L):
    """[(shape, label, round, rc, wall_s, log, command)] from runs.tsv, or
    from the log names of an older call."""
    rows = read_tsv(f"{L}/runs.tsv")
    if rows:
        return [(r[1], r[2], int(r[3]), r[4], float(r[5]), r[6], r[7].strip()) for r in rows
                if r[0] == "coda" and len(r) >= 8]
    walls = {}
    for l in read_tsv(f"{L}/coda-walls.txt"):
        m = re.match(r"coda (\S+) rc=(\d+) wall ([\d.]+) s", l[0])
        if m:
            walls[m.group(1)] = (m.group(2), float(m.group(3)))
    out = []
    for p in sorted(glob.glob(f"{L}/coda-*.txt")):
        shape = os.path.basename(p)[5:-4]
        if shape == "walls":
            continue
        rc, wall = walls.get(shape, ("", 0.0))
        out.append((shape, "", 1, rc, wall, os.path.basename(p), ""))
    return out


def k_tokens(x):
    return "%.1f K" % (x / 1e3) if x < 1e5 else "%.0f K" % (x / 1e3)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    L = args[0]
    jpath = args[args.index("--json") + 1] if "--json" in args else os.path.join(L, "train.json")
    meta = {r[0]: r[1] if len(r) > 1 else "" for r in read_tsv(f"{L}/meta.tsv")}
    if not meta.get("gpu"):  # older calls: nvidia-smi's CSV with its header
        g = read_tsv(f"{L}/gpu.txt")
        if len(g) > 1:
            meta["gpu"] = g[1][0].split(",")[0].strip()
    if not meta.get("commit"):
        c = read_tsv(f"{L}/commit.txt")
        if c:
            meta["commit"] = c[0][0].strip()
    common = {"gpu": meta.get("gpu") or None, "date": meta.get("date") or None,
              "commit": meta.get("commit") or None}
    variants = {}
    for v in meta.get("variants", "").split("|"):
        lab, _, a = v.partition(":")
        if lab.strip():
            variants[lab.strip()] = a.strip()
    recs = []

    # coda: one record per (shape, variant), the rounds merged (medians)
    groups = {}
    for shape, label, rnd, rc, wall, log, cmd in coda_runs(L):
        groups.setdefault((shape, label), []).append((rnd, rc, wall, log, cmd))
    for (shape, label), runs in groups.items():
        parsed = []
        for rnd, rc, wall, log, cmd in sorted(runs):
            try:
                text = open(f"{L}/{log}").read()
            except OSError:
                text = ""
            r = parse_coda(text)
            if r:
                if "first_step_s" not in r and wall:  # older builds: the wall less the steps
                    r["first_step_s"] = wall - r["ms_per_step"] / 1000.0 * (r["steps_timed"] + SKIP)
                parsed.append(r)
        rec = dict(system="coda", mode="coda", shape=shape, variant=label or None, **common,
                   command=runs[0][4] or None, log=[x[3] for x in sorted(runs)])
        if label:
            rec["variant_args"] = variants.get(label)
        if not parsed:
            if all(x[1] == "skipped" for x in runs):
                rec["error"] = "skipped: no time left"
            else:
                rec["error"] = "no timed step (rc %s; see %s)" % (
                    ",".join(str(x[1]) for x in runs), ", ".join(x[3] for x in runs))
            recs.append(rec)
            continue
        ms = median([p["ms_per_step"] for p in parsed])
        tps = parsed[0].get("tokens_per_step") or SHAPE_TOKENS.get(shape)
        mfu = [p["mfu"] for p in parsed if p.get("mfu") is not None]
        mem = [p["peak_mem_gib"] for p in parsed if p.get("peak_mem_gib") is not None]
        rec.update(tokens_per_s=round(tps / (ms / 1000.0)) if tps else None,
                   ms_per_step=round(ms, 2), mfu=round(median(mfu), 4) if mfu else None,
                   peak_mem_gib=round(max(mem), 2) if mem else None,
                   first_step_s=median([p["first_step_s"] for p in parsed if "first_step_s" in p]),
                   checkpoint_save_s=median([p["checkpoint_save_s"] for p in parsed
                                             if "checkpoint_save_s" in p]),
                   tokens_per_step=tps, steps_timed=sum(p["steps_timed"] for p in parsed),
                   rounds=len(parsed))
        if len(parsed) > 1:
            rec["round_ms_per_step"] = [round(p["ms_per_step"], 2) for p in parsed]
        profs = [p["profile"] for p in parsed if "profile" in p]
        if profs:
            names = list(profs[0]["phases"])
            rec["profile"] = {
                "steps": profs[0]["steps"], "warmup": profs[0]["warmup"], "runs": len(profs),
                "clock": profs[0]["clock"],
                "step_ms": round(median([p["step_ms"] for p in profs]), 3),
                "phases": {n: round(median([p["phases"].get(n, 0.0) for p in profs]), 3)
                           for n in names},
                "floor_ms": profs[0]["floor_ms"], "block_ms": profs[0]["block_ms"]}
        recs.append(rec)

    # the peers: their JSON lines; a process that failed names what it owed
    runs = {r[6]: r for r in read_tsv(f"{L}/runs.tsv") if r[0] != "coda" and len(r) >= 8}
    seen = set()
    logs = sorted(glob.glob(f"{L}/torch*.log")) + sorted(glob.glob(f"{L}/peers*.log"))
    for path in logs:
        log = os.path.basename(path)
        cmd = runs[log][7] if log in runs else None
        for line in open(path).read().splitlines():
            m = re.match(r"(TORCH|PEER) (\S+) (\S+) (\{.*\})\s*$", line)
            if not m:
                continue
            shape, mode = SHAPE_ALIAS.get(m.group(2), m.group(2)), m.group(3)
            r = json.loads(m.group(4))
            rec = dict(system=PEER_NAMES.get(mode, mode), mode=mode, shape=shape, variant=None,
                       **common, command=cmd, log=[log])
            if "error" in r:
                rec["error"] = r["error"]
            else:
                rec.update(tokens_per_s=r["tokens_per_s"], ms_per_step=r.get("ms_per_step"),
                           mfu=r.get("mfu_989"), peak_mem_gib=r.get("peak_mem_GiB"),
                           first_step_s=r.get("warmup_s"), checkpoint_save_s=None)
            recs = [x for x in recs if (x["mode"], x["shape"]) != (mode, shape)]
            recs.append(rec)
            seen.add((mode, shape))
    for log, r in runs.items():
        for shape in r[1].split(","):
            for mode in r[2].split(","):
                shape = SHAPE_ALIAS.get(shape, shape)
                if shape and mode and (mode, shape) not in seen:
                    what = "skipped: no time left" if r[4] == "skipped" else "failed (rc %s)" % r[4]
                    recs.append(dict(system=PEER_NAMES.get(mode, mode), mode=mode, shape=shape,
                                     variant=None, **common, command=r[7], log=[log],
                                     error="%s; see %s" % (what, log)))

    order = {s: i for i, s in enumerate(SHAPE_ORDER)}
    recs.sort(key=lambda x: (order.get(x["shape"], len(order)), x["shape"], x["mode"] != "coda",
                             x["system"]))

    def name(x):
        return "coda" + (" (%s)" % x["variant"] if x["variant"] else "")

    if any(common.values()):
        print("GPU: %s; commit %s; %s" % tuple(common[k] or "?" for k in ("gpu", "commit", "date")))
        print()
    print("| shape | system | tokens/s | ms/step | MFU (989 TFLOP/s) | peak device memory "
          "| time to first step | checkpoint save |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for x in recs:
        sysname = name(x) if x["mode"] == "coda" else x["system"]
        if "error" in x:
            print("| %s | %s | %s | | | | | |" % (x["shape"], sysname, x["error"]))
            continue
        fs = x.get("first_step_s")
        print("| " + " | ".join([
            x["shape"], sysname, k_tokens(x["tokens_per_s"]) if x.get("tokens_per_s") else "",
            "%.1f" % x["ms_per_step"] if x.get("ms_per_step") else "",
            "%.0f %%" % (100 * x["mfu"]) if x.get("mfu") is not None else "",
            "%.1f GiB" % x["peak_mem_gib"] if x.get("peak_mem_gib") is not None else "",
            ("%.1f s" if x["mode"] == "coda" else "%.0f s") % fs if fs is not None else "",
            "%.1f s" % x["checkpoint_save_s"] if x.get("checkpoint_save_s") is not None else ""])
            + " |")

    # coda against the fastest peer of the same call
    ratio = []
    for x in recs:
        if x["mode"] != "coda" or not x.get("tokens_per_s"):
            continue
        peers = [p for p in recs if p["shape"] == x["shape"] and p["mode"] != "coda"
                 and p.get("tokens_per_s")]
        if peers:
            best = max(peers, key=lambda p: p["tokens_per_s"])
            x["best_peer"] = best["system"]
            x["over_best_peer"] = round(x["tokens_per_s"] / best["tokens_per_s"], 3)
            ratio.append("| %s | %s | %s (%s) | %.2f |" % (
                x["shape"], name(x), best["system"], k_tokens(best["tokens_per_s"]),
                x["over_best_peer"]))
    if ratio:
        print()
        print("| shape | coda | fastest peer | coda / fastest peer (tokens/s) |")
        print("| --- | --- | --- | --- |")
        print("\n".join(ratio))

    # the step profiles: one table per shape, a column per variant
    shapes = []
    for x in recs:
        if "profile" in x and x["shape"] not in shapes:
            shapes.append(x["shape"])
    for shape in shapes:
        cols = [x for x in recs if x["shape"] == shape and "profile" in x]
        names = []
        for c in cols:
            names += [n for n in c["profile"]["phases"] if n not in names]
        first = cols[0]
        p0 = first["profile"]
        print()
        print("coda's step profile at %s, ms per step (%d steps after %d warm-up%s; %s):" % (
            shape, p0["steps"], p0["warmup"],
            ", median of %d runs" % p0["runs"] if p0["runs"] > 1 else "", p0["clock"]))
        print()
        head = ["phase", "floor"] + [c["variant"] or "coda" for c in cols]
        head += ["%s − %s" % (c["variant"], first["variant"]) for c in cols[1:]]
        print("| " + " | ".join(head) + " |")
        print("|" + " --- |" * len(head))
        floors = {}
        for c in cols:
            for n, v in c["profile"]["floor_ms"].items():
                floors.setdefault(n, v)
        for n in names + ["step (wall)"]:
            def val(c):
                p = c["profile"]
                return p["step_ms"] if n == "step (wall)" else p["phases"].get(n)
            cells = [n, "%.3f" % floors[n] if n in floors else ""]
            cells += ["%.3f" % val(c) if val(c) is not None else "" for c in cols]
            cells += ["%+.3f" % (val(c) - val(first)) if val(c) is not None and val(first) is not None
                      else "" for c in cols[1:]]
            print("| " + " | ".join(cells) + " |")

    out = {"gpu": common["gpu"], "date": common["date"], "commit": common["commit"],
           "command": meta.get("command") or None, "mfu_peak_flops": FLOPS_PEAK,
           "fields": {
               "tokens_per_s": "coda: tokens per step / median timed step; peers: their own count",
               "ms_per_step": "coda: median of the steps after the first %d (rounds: median of the "
                              "rounds' medians); peers: mean of 20 steps after 3 warm-up" % SKIP,
               "mfu": "fraction of 989 TFLOP/s, each system's own count",
               "peak_mem_gib": "coda: the largest dev_mem of its step lines; peers: "
                               "torch.cuda.max_memory_allocated",
               "first_step_s": "coda: set-up and first step (the trainer's time: line); peers: "
                               "their 3 warm-up steps (torch.compile included)",
               "profile": "coda --profile: phase -> ms per step (median over rounds)"},
           "records": recs}
    with open(jpath, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
