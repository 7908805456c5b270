"""One table of the training benchmark (bench/train/run.sh): coda's runs
from their step lines, the peers' from their JSON lines."""
import json
import re
import sys

L = sys.argv[1]
FLOPS_PEAK = 989e12
rows = []
walls = {}
try:
    for line in open(f"{L}/coda-walls.txt"):
        m = re.match(r"coda (\S+) rc=(\d+) wall ([\d.]+) s", line)
        if m:
            walls[m.group(1)] = (int(m.group(2)), float(m.group(3)))
except OSError:
    pass
for shape in ("d512", "1b"):
    try:
        text = open(f"{L}/coda-{shape}.txt").read()
    except OSError:
        continue
    steps = [l for l in text.splitlines() if l.startswith("step ")]
    def field(l, name):
        m = re.search(r"\b" + re.escape(name) + r"\s+([\d.]+)", l)
        return float(m.group(1)) if m else None
    timed = [l for l in steps if (field(l, "step") or 0) > 3]
    ms = [field(l, "ms/step") for l in timed if field(l, "ms/step")]
    mfu = [field(l, "mfu") for l in timed if field(l, "mfu") is not None]
    mem = [field(l, "dev_mem") for l in steps if field(l, "dev_mem")]
    tok = re.search(r"seq (\d+)", text)
    batch = {"d512": 16 * 1024, "1b": 4 * 2048}[shape]
    if not ms:
        rows.append((shape, "coda", "failed (see coda-%s.txt)" % shape, "", "", "", ""))
        continue
    ms.sort()
    med = ms[len(ms) // 2]
    rc, wall = walls.get(shape, (None, None))
    # the trainer's own count (set-up + first step; checkpoint saves apart)
    t = re.search(r"first step done ([\d.]+) s .*?; (\d+) checkpoint saves? ([\d.]+) s", text)
    if t:
        first = "%.1f s" % float(t.group(1))
        save = "%.1f s" % (float(t.group(3)) / max(int(t.group(2)), 1))
    else:  # older builds: the wall time less the steps (saves included)
        first = "%.0f s" % (wall - sum(ms) / 1000.0 * len(steps) / max(len(ms), 1)) if wall else ""
        save = ""
    rows.append((shape, "coda", "%.0f K" % (batch / med), "%.0f %%" % (sorted(mfu)[len(mfu) // 2]) if mfu else "",
                 "%.1f GiB" % (max(mem) / 1024) if mem else "", first, save))
for log, tag in (("torch.log", "TORCH"), ("peers.log", "PEER")):
    try:
        lines = open(f"{L}/{log}").read().splitlines()
    except OSError:
        continue
    for line in lines:
        if not line.startswith(tag + " "):
            continue
        _, shape, mode, js = line.split(" ", 3)
        r = json.loads(js)
        if "error" in r:
            rows.append((shape, mode, "error", "", "", "", ""))
            continue
        rows.append((shape, mode, "%.0f K" % (r["tokens_per_s"] / 1000),
                     "%.0f %%" % (100 * r.get("mfu_989", 0)), "%.1f GiB" % r.get("peak_mem_GiB", 0),
                     "%.0f s" % r["warmup_s"] if "warmup_s" in r else "", ""))
print("| shape | system | tokens/s | MFU (989 TFLOP/s) | peak device memory | time to first step | checkpoint save |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r in sorted(rows, key=lambda r: (r[0] != "1b", r[1] != "coda", r[1])):
    print("| " + " | ".join(r) + " |")
