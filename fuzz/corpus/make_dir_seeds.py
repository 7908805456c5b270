#!/usr/bin/env python3
"""Writes the seeds of fuzz/corpus/dir/ for the fuzz_dir harness
(fuzz/fuzz_corpus_dir.c): each seed is one directory, byte 0 the format asked
for (0 auto, 1 text, 2 jsonl, 3 llmc), then entries separated by "|#|",
each a kind byte, a name, '\\n' and the contents. The kind's low 3 bits:
0 file, 1 llm.c shard with a valid header, 2 llm.c shard whose header
starts with the contents' first 12 bytes, 3 subdirectory, 4 symbolic link
(the contents name the target), 5 FIFO; bits 3-5 add a suffix (1 .txt,
2 .jsonl, 3 .bin, 4 .parquet, 5 .dat, 6 .u8). The same seeds start
fuzz_corpusdir (the walk of coda train --corpus DIR), which ignores byte 0.

    python3 fuzz/corpus/make_dir_seeds.py
"""
import os
import struct

FILE, LLMC, LLMC_RAW, SUBDIR, LINK, FIFO = range(6)
TXT, JSONL, BIN, PARQUET, DAT, U8 = 1, 2, 3, 4, 5, 6
AUTO, TEXT, JSONLF, LLMCF = range(4)


def entry(kind, name, contents=b"", suffix=0):
    if isinstance(name, str):
        name = name.encode()
    return bytes([kind | suffix << 3]) + name + b"\n" + contents


def seed(fmt, *entries):
    return bytes([fmt]) + b"|#|".join(entries)


def tokens(*ts):
    return b"".join(struct.pack("<H", t) for t in ts)


seeds = {
    # name order is byte order: "10" before "9", "A" before "a", a name
    # that is a prefix of another first
    "01_text_order": seed(AUTO,
                          entry(FILE, "b", b"second file\n", TXT),
                          entry(FILE, "a", b"first file\n\nstill the first\n", TXT),
                          entry(FILE, "a.txt", b"after a.txt", TXT),
                          entry(FILE, "10", b"ten ", TXT),
                          entry(FILE, "9", b"nine ", TXT),
                          entry(FILE, "A", b"capital A ", TXT)),
    "02_jsonl": seed(AUTO,
                     entry(FILE, "part-00001", b'{"text":"one"}\n{"text":"two"}\n', JSONL),
                     entry(FILE, "part-00000", b'{"text":"zero \\u00e9"}\n\n', JSONL),
                     entry(FILE, "part-00002", b'{"text":"last"}', JSONL)),
    "03_jsonl_bad_second": seed(JSONLF,
                                entry(FILE, "a", b'{"text":"fine"}\n', JSONL),
                                entry(FILE, "b", b'{"text":"fine"}\n{"text":3}\n', JSONL),
                                entry(FILE, "c", b'not json\n', JSONL)),
    "04_llmc_named_split": seed(AUTO,
                                entry(LLMC, "shakespeare_train_000001", tokens(*range(40, 60)), BIN),
                                entry(LLMC, "shakespeare_train_000000", tokens(*range(1, 30)), BIN),
                                entry(LLMC, "shakespeare_val_000000", tokens(7, 8, 9, 65535), BIN),
                                entry(LLMC, "readme", tokens(1, 2, 3), BIN)),
    "05_llmc_blocks": seed(LLMCF,
                           entry(LLMC, "s1", tokens(*range(100, 190)), BIN),
                           entry(LLMC, "s0", tokens(*range(0, 120)), BIN),
                           entry(LLMC, "s2_val", tokens(5, 6), BIN)),
    "06_llmc_ambiguous": seed(AUTO,
                              entry(LLMC, "train", tokens(1, 2, 3, 4), BIN),
                              entry(LLMC, "val", tokens(1, 2, 3, 4), BIN),
                              entry(LLMC, "train_interval", tokens(1, 2), BIN)),
    "07_llmc_lies": seed(LLMCF,
                         entry(LLMC, "a", tokens(1, 2, 3, 4, 5), BIN),
                         entry(LLMC_RAW, "b", struct.pack("<iii", 20240520, 1, 9) + tokens(1, 2), BIN),
                         entry(LLMC_RAW, "c", struct.pack("<iii", 20240520, 2, 1) + tokens(1), BIN)),
    "08_not_files": seed(AUTO,
                         entry(FILE, "a", b"the only regular file, read once\n", TXT),
                         entry(SUBDIR, "sub", b"inside a subdirectory: not read\n", TXT),
                         entry(FILE, ".hidden", b"hidden: not read\n", TXT),
                         entry(FILE, "empty", b"", TXT),
                         entry(LINK, "link", b"a.txt", TXT),
                         entry(LINK, "dangling", b"nowhere.txt", TXT),
                         entry(LINK, "up", b"..", TXT),
                         entry(FIFO, "fifo", b"", TXT)),
    "09_link_loop": seed(AUTO,
                         entry(LINK, "x", b"y.txt", TXT),
                         entry(LINK, "y", b"x.txt", TXT),
                         entry(FILE, "z", b"some text to train on\n", TXT)),
    "10_parquet_magic": seed(AUTO,
                             entry(FILE, "a", b"plain text\n", TXT),
                             entry(FILE, "b", b"PAR1 looks like Parquet PAR1", TXT)),
    "11_parquet_only": seed(AUTO,
                            entry(FILE, "train-0000", b"PAR1....PAR1", PARQUET),
                            entry(FILE, "notes", b"not a format read\n")),
    "12_empty_dir": seed(TEXT),
    "13_mixed_formats": seed(JSONLF,
                             entry(FILE, "t", b"text is not asked for\n", TXT),
                             entry(FILE, "j", b'{"text":"asked for"}\n{"text":"yes"}\n', JSONL),
                             entry(LLMC, "b", tokens(1, 2, 3), BIN)),
    "14_odd_names": seed(AUTO,
                         entry(FILE, "caf\u00e9 na\u00efve", b"utf-8 name ", TXT),
                         entry(FILE, "a:1", b"a colon ", TXT),
                         entry(FILE, "with space", b"a space ", TXT),
                         entry(FILE, "x" * 100, b"a long name ", TXT),
                         entry(FILE, b"\xff\xfe", b"bytes ", TXT)),
    "15_many_blocks": seed(TEXT, *[entry(FILE, "doc%02d" % i, (b"document %d " % i) * 6, TXT)
                                   for i in range(8)]),
    "16_empty_files": seed(AUTO,
                           entry(FILE, "a", b"", TXT),
                           entry(FILE, "b", b"", TXT),
                           entry(FILE, "c", b"ab", TXT)),
    # the same kinds of entries where they are not named like corpus
    # files, or hidden: accepted, the link read through
    "17_links_ok": seed(AUTO,
                        entry(FILE, "a", b"the file, read twice\n", TXT),
                        entry(LINK, "b", b"a.txt", TXT),
                        entry(SUBDIR, "sub", b"inside a subdirectory: not read\n"),
                        entry(LINK, ".dangling", b"nowhere.txt", TXT),
                        entry(LINK, "up", b".."),
                        entry(FIFO, "fifo", b""),
                        entry(FIFO, ".fifo", b"", TXT)),
    # auto reads .txt and .jsonl together, each by its suffix, in name
    # order (the .jsonl was dropped without a word); another file is left
    # out with a warning
    "18_txt_and_jsonl": seed(AUTO,
                             entry(FILE, "b", b'{"text":"from json"}\n{"text":"more"}\n', JSONL),
                             entry(FILE, "a", b"plain text first\n", TXT),
                             entry(FILE, "c", b"plain text last\n", TXT),
                             entry(FILE, "notes.md", b"not read\n")),
    # llm.c token shards beside text: refused (no one stream)
    "19_text_beside_bin": seed(AUTO,
                               entry(FILE, "a", b"some text\n", TXT),
                               entry(LLMC, "b", tokens(1, 2, 3), BIN)),
    # a NUL byte in a text file, raw invalid UTF-8 in a JSON string
    "20_binary_and_bad_utf8": seed(AUTO,
                                   entry(FILE, "a", b"text\x00binary", TXT),
                                   entry(FILE, "b", b'{"text":"\xff"}\n', JSONL)),
    # a fortune directory: texts without a suffix, their indexes (X.dat,
    # X.u8: left out by the --corpus walk, silently), an index without its
    # text (named in a warning), JSON Lines read as such
    "21_fortune_indexes": seed(AUTO,
                               entry(FILE, "art", b"a fortune\n%\nanother one\n"),
                               entry(FILE, "art", b"\x00\x00\x00\x02index", DAT),
                               entry(FILE, "art", b"\x00\x00\x00\x02index", U8),
                               entry(FILE, "orphan", b"\x00\x01", DAT),
                               entry(FILE, "quotes", b'{"text":"a quote"}\n', JSONL),
                               entry(FILE, "zen", b"the last fortune file\n")),
    # only indexes: nothing the walk reads
    "22_only_indexes": seed(AUTO,
                            entry(FILE, "a", b"\x00\x00", DAT),
                            entry(FILE, "b", b"\x00\x00", U8)),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dir")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
