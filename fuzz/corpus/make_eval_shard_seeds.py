#!/usr/bin/env python3
"""Writes the seeds of fuzz/corpus/eval_shard/ for the fuzz_eval_shard
harness (fuzz/fuzz_eval_shard.c): byte 0 picks the checkpoint (bit 0: 0
bytes, 1 BPE; bit 5 with bit 0 clear: 300 ids without a tokenizer), the shard (bit 1: 0 the part's bytes, 1 a shard the harness
writes from a 4-byte vocabulary and uint16 tokens; bit 2 uint32) and
source.txt (bits 3-4: 0 none, 1 the source part, 2 the stamp's first line
and the source part, 3 a directory); then the shard part, "|#|" and the
source part ("@tok", "@copy", "@other", "@gone", "@ck": paths).

    python3 fuzz/corpus/make_eval_shard_seeds.py
"""
import os
import struct

BYTES, BPE, IDS = 0, 1, 32
RAW, BUILT, WIDE = 0, 2, 4
NONE, AS_IS, STAMP, SRC_DIR = 0, 8, 16, 24


def built(vocab, toks):
    return struct.pack("<I", vocab) + b"".join(struct.pack("<H", t) for t in toks)


def seed(flags, shard, source=b""):
    return bytes([flags]) + shard + (b"|#|" + source if source else b"")


def stamp(tok):
    return (b"path corpus.txt\nformat 0\ntext-field text\ntokenizer " + tok +
            b"\nsize 100\nmtime 1\nvocab 9\n")


ids = [i % 9 for i in range(40)]
seeds = {
    "01_bpe_no_stamp": seed(BPE | BUILT, built(9, ids)),
    "02_bpe_same": seed(BPE | BUILT | STAMP, built(9, ids), stamp(b"@copy")),
    "03_bpe_other": seed(BPE | BUILT | STAMP, built(9, ids), stamp(b"@other")),
    "04_bpe_gone": seed(BPE | BUILT | STAMP, built(9, ids), stamp(b"@gone")),
    "05_bpe_bytes_stamp": seed(BPE | BUILT | STAMP, built(9, ids), stamp(b"(bytes)")),
    "06_bpe_byte_vocab": seed(BPE | BUILT | WIDE, built(256, range(100, 140))),
    "07_bytes_tok_stamp": seed(BYTES | BUILT | STAMP, built(256, range(60, 100)), stamp(b"@tok")),
    "08_bytes_bytes_stamp": seed(BYTES | BUILT | STAMP, built(256, range(60, 100)), stamp(b"(bytes)")),
    "09_not_a_shard": seed(BYTES | RAW | AS_IS, b"some text that is no shard\n", b"user's own notes"),
    "10_short": seed(BPE | BUILT | STAMP, built(9, [1, 2, 3]), stamp(b"@ck")),
    "11_too_wide": seed(BYTES | BUILT, built(4096, range(0, 30))),
    "12_source_dir": seed(BPE | BUILT | SRC_DIR, built(300, range(250, 299))),
    "13_raw_header": seed(BPE | RAW, b"CODATOKS" + struct.pack("<IIQII", 1, 2, 9, 9, 0) +
                          b"".join(struct.pack("<H", t) for t in range(9))),
    "14_ids_tok_stamp": seed(IDS | BUILT | STAMP, built(9, ids), stamp(b"@tok")),
    "15_ids_bytes_stamp": seed(IDS | BUILT | STAMP, built(256, range(60, 100)), stamp(b"(bytes)")),
    "16_ids_no_stamp": seed(IDS | BUILT, built(300, range(250, 299))),
}

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eval_shard")
os.makedirs(d, exist_ok=True)
for name, b in seeds.items():
    with open(os.path.join(d, name), "wb") as f:
        f.write(b)
