#!/usr/bin/env python3
"""Writes the tokenizer.json seeds of fuzz/corpus/tokenizer/ with the
Hugging Face `tokenizers` package: small BPE tokenizers (vocabulary 300)
trained in the four styles tests/tokenizer/compare.py checks (GPT-2,
GPT-2 with prefix space, Llama 3, Qwen2 with NFC), so that mutations start
from files the real library writes. The text seeds (byte 0 picks the
harness's built-in tokenizer) are written too.

    python3 fuzz/corpus/make_tokenizer_seeds.py
"""
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "tokenizer"))
import compare  # noqa: E402  (its train() and text generator)

out = os.path.join(here, "tokenizer")
os.makedirs(out, exist_ok=True)
texts = compare.corpus(7, 300)
for kind in ("gpt2", "gpt2p", "llama3", "qwen2"):
    path = os.path.join(out, "%s.json" % kind)
    compare.train(kind, texts, path, vocab_size=300)
rng = random.Random(3)
samples = [
    b"The quick brown fox jumps over the lazy dog.",
    "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 don't I'm".encode(),
    b"hello world<s> <|endoftext|>hello world",
    b"\xff\xfe invalid \xc3 \xed\xa0\x80 bytes \xf4\x90\x80\x80",
    b"  spaces\t\ttabs\r\n\r\nnew lines 1234567 ...",
]
for i, s in enumerate(samples):
    with open(os.path.join(out, "text%d.txt" % i), "wb") as f:
        f.write(bytes([i % 3]) + s)
with open(os.path.join(out, "text_random.txt"), "wb") as f:
    f.write(bytes([1]) + compare.text(rng, 40, compare.SPECIALS).encode("utf-8", "surrogateescape"))
