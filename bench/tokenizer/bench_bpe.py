#!/usr/bin/env python3
"""Encode speed of coda's BPE tokenizer against `tokenizers`, one core.

Builds a few MB of text (the generator of tests/tokenizer/compare.py: mostly
English words, with CJK, Arabic, Devanagari, emoji, digits, whitespace
runs), trains a GPT-2 style and a Llama 3 style tokenizer on part of it,
and times encoding every line of the text:
  - tokenizers: Tokenizer.encode_batch with RAYON_NUM_THREADS=1;
  - coda: `coda tokenize --tokenizer FILE < text > /dev/null` (ids printed as
    text included), less the time of the same command on empty input (the
    load of tokenizer.json).
Both pinned to one CPU with taskset when it exists; best of --repeat runs.

    bench_bpe.py CODA_BINARY [--mb 4] [--repeat 3] [--vocab 8000]
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "tokenizer"))
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import compare  # noqa: E402  (the corpus generator and the trainers)


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main():
    coda = sys.argv[1]
    mb, repeat, vocab = arg("--mb", 4.0), arg("--repeat", 3), arg("--vocab", 8000)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    if pin:
        os.sched_setaffinity(0, {0})
    rng = random.Random(11)
    lines, size = [], 0
    while size < mb * 1e6:
        s = compare.text(rng, rng.randint(5, 80), []).replace("\n", " ").replace("\r", " ").replace("\u2028", " ").replace("\u0085", " ")
        lines.append(s)
        size += len(s.encode("utf-8")) + 1
    data = "".join(s + "\n" for s in lines).encode("utf-8")
    work = tempfile.mkdtemp(prefix="coda-bench-bpe-")
    txt = os.path.join(work, "text.txt")
    with open(txt, "wb") as f:
        f.write(data)
    empty = os.path.join(work, "empty.txt")
    open(empty, "wb").close()
    print(f"text: {len(data) / 1e6:.2f} MB, {len(lines)} lines; vocab {vocab}; best of {repeat}; "
          f"{'pinned to CPU 0' if pin else 'not pinned'}")
    print("| tokenizer | tokenizers MB/s | coda MB/s | coda / tokenizers | ids equal |")
    print("|---|---|---|---|---|")
    for kind in ("gpt2", "llama3"):
        path = os.path.join(work, f"{kind}.json")
        tok, _ = compare.train(kind, lines[: len(lines) // 4], path, vocab)
        best_ref = min(timed(lambda: tok.encode_batch(lines, add_special_tokens=False)) for _ in range(repeat))
        want = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]

        def run(inp):
            with open(inp, "rb") as f:
                t = time.perf_counter()
                p = subprocess.run(pin + [coda, "tokenize", "--tokenizer", path], stdin=f, stdout=subprocess.PIPE, check=True)
                return time.perf_counter() - t, p.stdout
        load = min(run(empty)[0] for _ in range(repeat))
        runs = [run(txt) for _ in range(repeat)]
        best_coda = min(r[0] for r in runs) - load
        got = [[int(x) for x in ln.split()] for ln in runs[0][1].decode().split("\n")[:-1]]
        ref_mbs, coda_mbs = len(data) / 1e6 / best_ref, len(data) / 1e6 / best_coda
        print(f"| {kind} | {ref_mbs:.1f} | {coda_mbs:.1f} | {coda_mbs / ref_mbs:.2f}x | {'yes' if got == want else 'NO'} |")
    shutil.rmtree(work)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
