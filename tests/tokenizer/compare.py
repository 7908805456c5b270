#!/usr/bin/env python3
"""coda's BPE tokenizer against the `tokenizers` library.

Trains byte-level BPE tokenizers with `tokenizers` on a corpus built here
(GPT-2 style: ByteLevel pre-tokenizer; Llama 3 and Qwen2 style: Split regex
+ ByteLevel(use_regex=False), Qwen2 with the NFC normalizer; special tokens;
BOS/EOS templates), saves each
tokenizer.json, and checks on thousands of strings that `coda tokenize`
gives the library's ids, that coda's decode gives the library's text, that
decode(encode(x)) == x, and that bytes which are not UTF-8 encode without
failing and decode back to themselves.

    compare.py CODA_BINARY WORK_DIR [--strings N]

Needs the `tokenizers` package (scripts/install-deps.sh installs it); without
it the test fails with a message saying so.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

try:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
except ImportError:
    sys.stderr.write(
        "compare.py: FAILED: the Python package `tokenizers` is not installed; it is the reference\n"
        "this test compares coda's tokenizer with. Install it with\n"
        "    python3 -m pip install --only-binary=:all: tokenizers==0.23.3\n"
        "(scripts/install-deps.sh does so).\n")
    sys.exit(1)

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
             r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
            r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

WORDS = ("the of and to in is was it for on that with as at by this be are from or an have not "
         "Hello World Tokenizer coda BPE GPT Llama Qwen don't it's I'm we'll they've she'd YOU'RE IT'S "
         "We'LL caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u0130stanbul "
         "\u017fhip stra\u00dfe \u00c6sir").split()
CJK = "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u4e2d\u6587\u6587\u672c\u6f22\u5b57\u304b\u306a\u30ab\u30ca\ud55c\uad6d\uc5b4"
ARABIC = ["\u0645\u0631\u062d\u0628\u0627", "\u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u0627\u0644\u0633\u0644\u0627\u0645",
          "\u0639\u0644\u064a\u0643\u0645", "\u0661\u0662\u0663"]
DEVANAGARI = ["\u0928\u092e\u0938\u094d\u0924\u0947", "\u0926\u0941\u0928\u093f\u092f\u093e", "\u0939\u093f\u0928\u094d\u0926\u0940",
              "\u0915\u094d\u0937", "\u0967\u0968\u0969"]
EMOJI = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
         "\U0001F3F3\uFE0F\u200D\U0001F308", "\u2764\uFE0F", "\U0001F1EF\U0001F1F5", "\U0001F9D1\u200D\U0001F4BB"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "\u0301", "o\u0302\u0323", "Z\u0351\u036b\u0343"]
SPACES = [" ", "  ", "    ", "\t", "\t\t", " \t ", "\u00a0", "\u3000", "\u2009", "\u2028", "\u0085", "\u200b",
          "\n", "\r\n", "\r\n\r\n", "\n\n\n", " \n ", "\r", "\u000b", "\u000c", "   \n"]
PUNCT = list(".,;:!?()[]{}<>\"'`~@#$%^&*-_=+|\\/") + ["...", "--", "\u2014", "\u00ab", "\u00bb", "\u2019", "\u201c"]
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]


def piece(rng, specials):
    r = rng.random()
    if r < 0.30:
        w = rng.choice(WORDS)
        return w if rng.random() < 0.8 else w.upper()
    if r < 0.38:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 6)))
    if r < 0.43:
        return rng.choice(ARABIC)
    if r < 0.48:
        return rng.choice(DEVANAGARI)
    if r < 0.53:
        return rng.choice(EMOJI)
    if r < 0.57:
        return rng.choice(COMBINING)
    if r < 0.72:
        return rng.choice(SPACES)
    if r < 0.80:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
    if r < 0.90:
        return rng.choice(PUNCT)
    if r < 0.93 and specials:
        return rng.choice(specials)
    if r < 0.96:
        return "'" + rng.choice(["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Ll", "x", "\u017f"])
    # any character assigned in Python's Unicode (older than both sides'
    # tables: characters assigned later may have other categories in the
    # library's Unicode than in utf8proc's, docs/tokenizer.md)
    while True:
        cp = rng.randint(1, 0x2FFFF) if rng.random() < 0.7 else rng.randint(1, 0x3000)
        if not 0xD800 <= cp < 0xE000 and unicodedata.category(chr(cp)) != "Cn":
            return chr(cp)


def text(rng, n_pieces, specials):
    out = []
    for _ in range(n_pieces):
        out.append(piece(rng, specials))
        if rng.random() < 0.5:
            out.append(" ")
    return "".join(out)


def corpus(seed, n):
    rng = random.Random(seed)
    return [text(rng, rng.randint(5, 60), []) for _ in range(n)]


def train(kind, train_texts, path, vocab_size=3000):
    specials = {"gpt2": ["<|endoftext|>"], "gpt2p": ["<|endoftext|>"],
                "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>"],
                "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}[kind]
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind in ("gpt2", "gpt2p"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=(kind == "gpt2p"))
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        regex = LLAMA3_RE if kind == "llama3" else QWEN2_RE
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_texts, trainer)
    # BOS/EOS templates with the ids the trainer gave the special tokens
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    elif kind == "qwen2":
        tok.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A <|im_end|>",
            special_tokens=[("<|im_start|>", tok.token_to_id("<|im_start|>")), ("<|im_end|>", tok.token_to_id("<|im_end|>"))])
    tok.save(path)
    if kind == "gpt2":
        # the older file form: merges as "a b" strings
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        doc["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
    return tok, specials


def nfc(kind, b):
    """What decode(encode(b)) gives: b, with NFC on the UTF-8 runs for qwen2."""
    if kind != "qwen2":
        return b
    return unicodedata.normalize("NFC", b.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def run_coda(coda, path, data, *flags):
    p = subprocess.run([coda, "tokenize", "--tokenizer", path, *flags], input=data, capture_output=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"compare.py: FAILED: coda tokenize {' '.join(flags)} exited with {p.returncode}")
    return p.stdout


def parse_ids(out):
    lines = out.decode("ascii").split("\n")
    assert lines[-1] == ""
    return [[int(x) for x in ln.split()] for ln in lines[:-1]]


def main():
    coda, work = sys.argv[1], sys.argv[2]
    n_strings = int(sys.argv[sys.argv.index("--strings") + 1]) if "--strings" in sys.argv else 3000
    os.makedirs(work, exist_ok=True)
    train_texts = corpus(1, 4000)
    failures = 0
    compared = 0
    for kind in ("gpt2", "gpt2p", "llama3", "qwen2"):
        path = os.path.join(work, f"{kind}.json")
        tok, specials = train(kind, train_texts, path)
        rng = random.Random({"gpt2": 2, "gpt2p": 3, "llama3": 4, "qwen2": 5}[kind])
        strings = [text(rng, rng.randint(1, 40), specials + SPECIALS[:1]) for _ in range(n_strings)]
        strings += ["", " ", "\r\n", "a", "  a", "a  ", "\t\tx", "x\n\n", "123456789", "'s", "'S'LL", "1 2  3   4",
                    "\u017f", "'\u017f", "don't DON'T", "<|endoftext|><|endoftext|>", "<|endoftext", "endoftext|>"]
        # very long lines
        strings += [text(rng, 3000, specials) for _ in range(3)]
        strings += ["a" * 20000, " " * 5000 + "x", "\U0001F600" * 3000, "9" * 10001]
        data = b"".join(s.encode("utf-8") + b"\0" for s in strings)
        for add_special in (False, True):
            flags = ["-z"] + (["--add-special"] if add_special else [])
            got = parse_ids(run_coda(coda, path, data, *flags))
            want = [e.ids for e in tok.encode_batch(strings, add_special_tokens=add_special)]
            if len(got) != len(want):
                print(f"{kind}: coda gave {len(got)} lines for {len(want)} strings")
                failures += 1
                continue
            for s, g, w in zip(strings, got, want):
                compared += 1
                if g != w:
                    failures += 1
                    if failures <= 10:
                        print(f"{kind} add_special={add_special}: MISMATCH on {s[:200]!r}\n  coda:       {g[:60]}\n  tokenizers: {w[:60]}")
        # decode: coda's text equals the library's, and (no prefix space) the input
        ids_lines = "".join(" ".join(map(str, e.ids)) + "\n" for e in tok.encode_batch(strings, add_special_tokens=False))
        dec = run_coda(coda, path, ids_lines.encode(), "--decode", "-z").split(b"\0")[:-1]
        for s, d, e in zip(strings, dec, tok.encode_batch(strings, add_special_tokens=False)):
            want = tok.decode(e.ids, skip_special_tokens=False).encode("utf-8")
            compared += 1
            if d != want or (kind != "gpt2p" and d != nfc(kind, s.encode("utf-8"))):
                failures += 1
                if failures <= 10:
                    print(f"{kind}: DECODE MISMATCH on {s[:100]!r}: coda {d[:100]!r}, tokenizers {want[:100]!r}")
        # decode leaving out special tokens, from ids with BOS/EOS
        encs = tok.encode_batch(strings, add_special_tokens=True)
        ids_lines = "".join(" ".join(map(str, e.ids)) + "\n" for e in encs)
        dec = run_coda(coda, path, ids_lines.encode(), "--decode", "-z", "--skip-special").split(b"\0")[:-1]
        for s, d, e in zip(strings, dec, encs):
            want = tok.decode(e.ids, skip_special_tokens=True).encode("utf-8")
            compared += 1
            if d != want:
                failures += 1
                if failures <= 10:
                    print(f"{kind}: SKIP-SPECIAL DECODE MISMATCH on {s[:100]!r}: coda {d[:100]!r}, tokenizers {want[:100]!r}")
        # bytes that are not UTF-8: no failure, and they decode back to themselves
        brng = random.Random(7)
        raw = []
        for _ in range(500):
            b = bytearray()
            for _ in range(brng.randint(1, 40)):
                r = brng.random()
                if r < 0.4:
                    b += bytes([brng.randint(0x80, 0xFF)])
                elif r < 0.7:
                    b += brng.choice(strings[:200]).encode("utf-8")[:8]
                else:
                    b += bytes([brng.randint(1, 0x7F)])
            raw.append(bytes(b).replace(b"\0", b""))
        ids = run_coda(coda, path, b"".join(r + b"\0" for r in raw), "-z")
        back = run_coda(coda, path, ids, "--decode", "-z").split(b"\0")[:-1]
        for r, d in zip(raw, back):
            compared += 1
            if kind != "gpt2p" and nfc(kind, r) != d:
                failures += 1
                if failures <= 10:
                    print(f"{kind}: INVALID-UTF-8 ROUND TRIP MISMATCH on {r!r}: {d!r}")
        print(f"{kind}: {len(strings)} strings, vocab {tok.get_vocab_size()}, merges file form "
              f"{'strings' if kind == 'gpt2' else 'pairs'}")
    print(f"compare.py: {compared} comparisons, {failures} mismatches")
    print(f"{compared - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
