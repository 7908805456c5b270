#!/usr/bin/env python3
"""Every repository path named in a comment exists.

Scans the comments of src/, include/, tests/, python/, scripts/, bench/
(but its dated results), fuzz/, cmake/ and the top CMakeLists.txt (C and
CUDA block and line comments; '#' comments of Python, shell and CMake
files) and the whole text of docs/*.md and README.md for tokens that look
like paths, and prints FILE:LINE: PATH for each one that names nothing.

A token is checked when it holds a '/' and either starts with a top-level
folder of the repository or ends in a source or document extension (.c,
.h, .md, ...). It may be written from the repository root, from src/ (the
include root: `api/api.h`), from src/backends, include/, tests/ or
python/, or from the folder of the file that names it. Placeholders
(`NAME`, `*`, `<dir>`), URLs, absolute and home paths, and paths under
build folders are not paths of the repository; a program the build makes
(`tests/test_train_device`, `bench/block/bench_block`) counts as its
source, and OPTIONAL lists the files scripts use only when present.

  tests/check_comment_paths.py [REPO_ROOT]   (default: the parent of tests/)
Exits 1 when a path is missing.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
TOP = ("src", "include", "tests", "python", "scripts", "docs", "bench", "programs", "fuzz", "cmake")
EXTS = ("c", "h", "cu", "cuh", "cc", "cpp", "py", "sh", "md", "coda", "def", "cmake", "in", "toml", "pyi")
BASES = ("", "src", "src/backends", "include", "tests", "python", "python/coda")
# folders a path may name that are made by a build or a run, not kept in the repository
GENERATED = ("build", "build-cpu", "generated", "CMakeFiles", "_skbuild", "dist", "out")
SCAN_DIRS = ("src", "include", "tests", "python", "scripts", "bench", "fuzz", "cmake")
# dated records: they name the tree of their day
HISTORY = ("bench/results",)
C_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")
HASH_EXT = (".py", ".sh", ".cmake", ".txt", ".toml")

TOKEN = re.compile(r"[A-Za-z0-9_.+\-/]*/[A-Za-z0-9_.+\-/]*")


def comments_c(text):
    """(line, comment text) of every block and line comment, strings skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k, part in enumerate(text[i:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def comments_hash(text):
    """'#' comments: a '#' at the start of a line or after a space, outside
    quotes (good enough for the project's Python, shell and CMake)."""
    out = []
    for no, l in enumerate(text.split("\n"), 1):
        q = None
        for k, c in enumerate(l):
            if q:
                if c == q:
                    q = None
            elif c in "\"'":
                q = c
            elif c == "#" and (k == 0 or l[k - 1] in " \t"):
                if not l.startswith("#!"):
                    out.append((no, l[k:]))
                break
    return out


def candidate(tok):
    """The path a token names, or None when it is not one to check."""
    tok = tok.strip(".,;:)(`'\"")
    tok = re.sub(r":\d+$", "", tok)  # file.c:123
    if "/" not in tok or tok.startswith(("/", "~", "./", "../")) or "//" in tok:
        return None
    parts = [p for p in tok.split("/") if p]
    if not parts or any(p in ("...", "..", ".") for p in parts):
        return None
    if any(re.fullmatch(r"[A-Z][A-Z0-9_]*", os.path.splitext(p)[0]) for p in parts):
        return None  # NAME, DIR, FILE: placeholders
    if parts[0] in GENERATED or any(p in GENERATED for p in parts[:-1]):
        return None
    ext = os.path.splitext(parts[-1])[1].lstrip(".")
    if parts[0] in TOP and len(parts) > 1:
        return tok.rstrip("/")
    if ext in EXTS and re.fullmatch(r"[a-z0-9_]+", parts[0]):
        return tok
    return None


# Files the scripts look for and use when someone puts them there; not kept.
OPTIONAL = ("bench/block/baseline_torch.py",)


def built(full):
    """A program the build makes from a source beside it: NAME from
    NAME.c or NAME.cu, or an add_executable(NAME ...) of its folder."""
    if os.path.exists(full + ".c") or os.path.exists(full + ".cu"):
        return True
    cm = os.path.join(os.path.dirname(full), "CMakeLists.txt")
    if not os.path.exists(cm):
        return False
    with open(cm, encoding="utf-8") as fh:
        return re.search(r"add_executable\(\s*" + re.escape(os.path.basename(full)) + r"\b", fh.read()) is not None


def exists(path, src_file):
    if path in OPTIONAL:
        return True
    here = os.path.dirname(src_file)
    for base in BASES + (os.path.relpath(here, ROOT),):
        full = os.path.join(ROOT, base, path)
        if os.path.exists(full) or (not os.path.splitext(path)[1] and built(full)):
            return True
    return False


def scan(rel, lines, missing):
    for no, text in lines:
        if "://" in text:
            text = re.sub(r"\S+://\S+", " ", text)
        for m in TOKEN.finditer(text):
            start = m.start()
            if start > 0 and text[start - 1] in "$%<{*":
                continue
            tok = m.group(0)
            if any(c in text[m.end():m.end() + 1] for c in "*<{$"):
                continue
            path = candidate(tok)
            if path and not exists(path, os.path.join(ROOT, rel)):
                missing.append(f"{rel}:{no}: {path}")


def main():
    missing = []
    files = []
    for d in SCAN_DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = [x for x in dirnames if not x.startswith(".") and x not in GENERATED
                           and x != "__pycache__"]
            if os.path.relpath(dirpath, ROOT) in HISTORY:
                dirnames[:] = []
                continue
            files += [os.path.join(dirpath, x) for x in names]
    docs = os.path.join(ROOT, "docs")
    files += [os.path.join(docs, x) for x in sorted(os.listdir(docs)) if x.endswith(".md")]
    files += [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CMakeLists.txt")]
    for f in sorted(files):
        rel = os.path.relpath(f, ROOT)
        try:
            with open(f, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        if f.endswith(C_EXT):
            lines = comments_c(text)
        elif f.endswith(HASH_EXT) or os.path.basename(f) == "CMakeLists.txt":
            lines = comments_hash(text)
        elif f.endswith(".md"):
            lines = list(enumerate(text.split("\n"), 1))
        else:
            continue
        scan(rel, lines, missing)
    for m in missing:
        print(f"check_comment_paths: {m}: no such file or folder")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
