#!/usr/bin/env python3
"""coda against an independent fp64 computation (reference_fp64.py, Python
standard library only) on the fixtures of build_fixtures.py: CTest hf_fp64.
Needs neither torch nor recorded.json, so it holds for fixtures whose
transformers numbers have not been recorded yet. The reference covers every
family of the fixtures (Llama, Mistral, Qwen3, GPT-2, Gemma 3).

    python3 tests/hf_reference/check_fp64.py CODA WORKDIR [RECORDED_JSON]

Per fixture without RoPE scaling (which the fp64 reference leaves out):
  - the reference itself against transformers where recorded.json has the
    fixture (same bytes): loss within 1e-6 relative, the same greedy tokens;
    so the reference is checked against transformers on each recorded
    fixture before it judges coda;
  - `coda eval --engine reference` (fp32 on the CPU) on the Hugging Face
    directory: the loss within 1e-5 relative of the reference's;
  - `coda generate --device cpu` greedy from the prompt: the reference's
    tokens (the reference's smallest top-2 logit gap must exceed 1e-4, so
    the tokens do not hinge on rounding).
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_fixtures  # noqa: E402
import check_coda  # noqa: E402
import reference_fp64  # noqa: E402

LOSS_RTOL = 1e-5
REF_RTOL = 1e-6
MIN_MARGIN = 1e-4


def check(coda, work, recorded):
    fails = []
    fix_dir = os.path.join(work, "fixtures")
    names = build_fixtures.build(fix_dir)
    checked = 0
    for name in names:
        d = os.path.join(fix_dir, name)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        if cfg.get("rope_scaling"):
            print("%-15s skipped: RoPE scaling is not part of the fp64 reference" % name)
            continue
        with open(os.path.join(d, "inputs.json")) as f:
            inputs = json.load(f)
        model = reference_fp64.Model(d)
        want = model.loss(inputs["tokens"])
        gen_ref, margin = model.greedy(inputs["prompt"], int(inputs["new_tokens"]))
        rec = recorded.get("fixtures", {}).get(name)
        if rec is not None and all(check_coda.sha256(os.path.join(d, f)) == h
                                   for f, h in rec["sha256"].items()):
            rel = abs(want - rec["loss"]) / abs(rec["loss"])
            ok = rel <= REF_RTOL and gen_ref == rec["generated"]
            print("%-15s fp64 reference vs transformers: loss rel %.2e, greedy %s  %s"
                  % (name, rel, "same" if gen_ref == rec["generated"] else "differs",
                     "ok" if ok else "FAIL"))
            if not ok:
                fails.append("%s: the fp64 reference disagrees with transformers' record (loss "
                             "%.17g vs %r, greedy %s vs %s): the reference is wrong"
                             % (name, want, rec["loss"], gen_ref, rec["generated"]))
        if margin <= MIN_MARGIN:
            fails.append("%s: a greedy step of the reference has a top-2 gap of %.3g: the "
                         "fixture cannot judge greedy tokens" % (name, margin))
        shard = os.path.join(work, name + ".tok")
        check_coda.write_shard(shard, inputs["tokens"], cfg["vocab_size"])
        got, _ = check_coda.coda_loss(coda, d, shard, len(inputs["tokens"]))
        rel = abs(got - want) / abs(want)
        ok = rel <= LOSS_RTOL
        print("%-15s loss coda %.9f  fp64 %.12f  rel %.2e  %s"
              % (name, got, want, rel, "ok" if ok else "FAIL"))
        if not ok:
            fails.append("%s: coda's loss %.9f, the fp64 reference's %.12f (relative difference "
                         "%.3g > %g)" % (name, got, want, rel, LOSS_RTOL))
        gen = check_coda.coda_greedy(coda, d, inputs["prompt"], int(inputs["new_tokens"]))
        ok = gen == gen_ref
        print("%-15s greedy %d tokens (reference's smallest gap %.3g)  %s"
              % (name, len(gen), margin, "ok" if ok else "FAIL"))
        if not ok:
            fails.append("%s: greedy tokens differ:\n  coda      %s\n  reference %s"
                         % (name, gen, gen_ref))
        checked += 1
    return fails, checked


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    coda, work = argv[1], argv[2]
    rec_path = argv[3] if len(argv) == 4 else os.path.join(HERE, "recorded.json")
    recorded = {}
    if os.path.isfile(rec_path):
        with open(rec_path) as f:
            recorded = json.load(f)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        fails, n = check(coda, work, recorded)
    except RuntimeError as e:
        print("hf_fp64: FAILED: %s" % e)
        return 1
    if fails:
        print("hf_fp64: FAILED:\n" + "\n".join(fails))
        return 1
    print("hf_fp64: ok (%d fixtures against the fp64 reference)" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
