#!/usr/bin/env python3
"""coda against Hugging Face transformers on the fixtures of
build_fixtures.py, with transformers' numbers read from recorded.json
(record_transformers.py made it where torch is installed): CTest
hf_reference. Python standard library only.

    python3 tests/hf_reference/check_coda.py CODA WORKDIR [RECORDED_JSON] [--perturbed]

Per fixture:
  - the fixture built here is byte for byte the one recorded (SHA-256 of
    config.json, model.safetensors, inputs.json);
  - `coda eval --engine reference` (fp32 on the CPU) on the Hugging Face
    directory itself and on the checkpoint `coda train --import-hf` makes
    of it: the loss of the fixed tokens within 1e-5 relative of
    transformers';
  - `coda generate --device cpu` greedy from the prompt (--prompt-ids,
    --print-ids): the same token ids as transformers' generate().

A fixture that recorded.json has no entry for fails the run, naming it and
the command that records it (as a record made from other fixture bytes
does).

--perturbed checks the check: every recorded loss is moved by 1e-4
relative and one generated id of every fixture is changed, and the run
passes only if every fixture then fails both comparisons (and every
fixture built has a record).
"""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_fixtures  # noqa: E402

LOSS_RTOL = 1e-5

RECORD_HOWTO = (
    "where torch and transformers are installed, run\n"
    "    python3 tests/hf_reference/build_fixtures.py FIXTURE_DIR\n"
    "    python3 tests/hf_reference/record_transformers.py FIXTURE_DIR "
    "tests/hf_reference/recorded.json\n"
    "and commit tests/hf_reference/recorded.json")


def record_missing_howto(names):
    """The commands that record only the fixtures `names`, keeping the others' records."""
    return ("where torch and transformers are installed, run\n"
            "    python3 tests/hf_reference/build_fixtures.py FIXTURE_DIR\n"
            "    python3 tests/hf_reference/record_transformers.py FIXTURE_DIR "
            "tests/hf_reference/recorded.json --only %s\n"
            "and commit tests/hf_reference/recorded.json" % ",".join(names))


def missing_records(names, recorded):
    """Failure messages for built fixtures that recorded.json lacks and for
    recorded fixtures no longer built."""
    rec = recorded.get("fixtures", {})
    lack = [n for n in names if n not in rec]
    out = []
    if lack:
        out.append("no transformers record in recorded.json for fixture%s %s (not recorded "
                   "yet).\nTo record %s, %s"
                   % ("s" if len(lack) > 1 else "", ", ".join(lack),
                      "them" if len(lack) > 1 else "it", record_missing_howto(lack)))
    gone = sorted(set(rec) - set(names))
    if gone:
        out.append("recorded.json holds fixtures that build_fixtures.py no longer builds (%s): "
                   "record again.\nTo record them, %s" % (", ".join(gone), RECORD_HOWTO))
    return out


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_shard(path, tokens, vocab):
    """A coda token shard (src/data/shards.c): "CODATOKS", version 1, width,
    count, vocab, CRC-32 of the payload, then the tokens little-endian."""
    width = 2 if vocab <= 65536 else 4
    body = struct.pack("<%d%s" % (len(tokens), "H" if width == 2 else "I"), *tokens)
    head = b"CODATOKS" + struct.pack("<IIQII", 1, width, len(tokens), vocab, zlib.crc32(body))
    with open(path, "wb") as f:
        f.write(head + body)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return p.stdout


def coda_loss(coda, checkpoint, shard, n_tokens):
    out = run([coda, "eval", "--checkpoint", checkpoint, "--data", shard, "--device", "cpu",
               "--engine", "reference", "--seq", str(n_tokens - 1), "--batch", "1"])
    m = re.search(r": loss ([0-9.eE+-]+) .*\((\d+) tokens in (\d+) windows\)", out)
    if not m:
        raise RuntimeError("coda eval printed no loss line:\n" + out)
    if int(m.group(2)) != n_tokens - 1 or int(m.group(3)) != 1:
        raise RuntimeError("coda eval scored %s tokens in %s windows, expected %d in 1:\n%s"
                           % (m.group(2), m.group(3), n_tokens - 1, out))
    return float(m.group(1)), out


def coda_greedy(coda, model_dir, prompt, n_new):
    out = run([coda, "generate", "--checkpoint", model_dir, "--device", "cpu",
               "--temperature", "0", "--tokens", str(n_new),
               "--prompt-ids", ",".join(str(t) for t in prompt), "--print-ids"])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) != 1 or not re.fullmatch(r"\d+( \d+)*", lines[0].strip()):
        raise RuntimeError("coda generate --print-ids printed something else than one line "
                           "of ids:\n" + out)
    return [int(x) for x in lines[0].split()]


def perturb(recorded):
    for rec in recorded["fixtures"].values():
        rec["loss"] *= 1.0 + 1e-4
        g = rec["generated"]
        g[len(g) // 2] = (g[len(g) // 2] + 1) % 256


def check(coda, work, recorded):
    """Failure messages ([] when everything agrees)."""
    fails = []
    fix_dir = os.path.join(work, "fixtures")
    names = build_fixtures.build(fix_dir)
    fails += missing_records(names, recorded)
    print("reference: transformers %s, torch %s, recorded %s"
          % (recorded.get("transformers"), recorded.get("torch"), recorded.get("date")))
    for name in names:
        rec = recorded.get("fixtures", {}).get(name)
        if rec is None:
            continue
        d = os.path.join(fix_dir, name)
        changed = [f for f, h in sorted(rec["sha256"].items()) if sha256(os.path.join(d, f)) != h]
        if changed:
            fails.append("%s: %s differ from the recorded fixture (build_fixtures.py changed): "
                         "record again" % (name, ", ".join(changed)))
            continue
        with open(os.path.join(d, "inputs.json")) as f:
            inputs = json.load(f)
        with open(os.path.join(d, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        shard = os.path.join(work, name + ".tok")
        write_shard(shard, inputs["tokens"], vocab)
        ck_dir = os.path.join(work, "ck-" + name)
        run([coda, "train", "--import-hf", d, "--out", ck_dir])
        want = rec["loss"]
        for what, path in (("the Hugging Face directory", d),
                           ("the imported checkpoint", os.path.join(ck_dir, "checkpoint.safetensors"))):
            got, _ = coda_loss(coda, path, shard, len(inputs["tokens"]))
            rel = abs(got - want) / abs(want)
            ok = rel <= LOSS_RTOL
            print("%-14s loss %-28s coda %.6f  transformers %r  rel %.2e  %s"
                  % (name, "(" + what + ")", got, want, rel, "ok" if ok else "FAIL"))
            if not ok:
                fails.append("%s: coda's loss of %s is %.6f, transformers' %r (relative "
                             "difference %.3g > %g)" % (name, what, got, want, rel, LOSS_RTOL))
        gen = coda_greedy(coda, d, inputs["prompt"], int(inputs["new_tokens"]))
        ok = gen == rec["generated"]
        print("%-14s greedy %d tokens  %s" % (name, len(gen), "ok" if ok else "FAIL"))
        if not ok:
            at = next((i for i, (a, b) in enumerate(zip(gen, rec["generated"])) if a != b),
                      min(len(gen), len(rec["generated"])))
            fails.append("%s: greedy tokens differ from token %d on:\n  coda         %s\n  "
                         "transformers %s" % (name, at, gen, rec["generated"]))
    return fails


def main(argv):
    args = [a for a in argv[1:] if a != "--perturbed"]
    perturbed = len(args) != len(argv) - 1
    if len(args) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    coda, work = args[0], args[1]
    rec_path = args[2] if len(args) == 3 else os.path.join(HERE, "recorded.json")
    if not os.path.isfile(rec_path):
        print("hf_reference: FAILED: %s is missing: transformers' numbers have not been "
              "recorded.\nTo record them, %s" % (rec_path, RECORD_HOWTO))
        return 1
    with open(rec_path) as f:
        recorded = json.load(f)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if perturbed:
        perturb(recorded)
    try:
        fails = check(coda, work, recorded)
    except RuntimeError as e:
        print("hf_reference: FAILED: %s" % e)
        return 1
    if perturbed:
        missing = [f for f in fails if "no transformers record" in f or "no longer builds" in f]
        if missing:
            print("hf_reference (perturbed): FAILED:\n" + "\n".join(missing))
            return 1
        # every fixture must fail both its loss and its greedy comparison
        n = len(recorded["fixtures"])
        loss_fails = sum(1 for f in fails if "loss of" in f)
        greedy_fails = sum(1 for f in fails if "greedy tokens differ" in f)
        if loss_fails == 2 * n and greedy_fails == n and len(fails) == 3 * n:
            print("hf_reference (perturbed): ok: all %d perturbed comparisons failed" % (3 * n))
            return 0
        print("hf_reference (perturbed): FAILED: of %d perturbed comparisons only %d losses and "
              "%d greedy runs were caught:\n%s" % (3 * n, loss_fails, greedy_fails, "\n".join(fails)))
        return 1
    if fails:
        print("hf_reference: FAILED:\n" + "\n".join(fails))
        return 1
    print("hf_reference: ok (%d fixtures)" % len(recorded["fixtures"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
