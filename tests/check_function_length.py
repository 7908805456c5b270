#!/usr/bin/env python3
"""No function in src/ runs over 150 lines.

A function is found from its opening line (a line at column 0 that is not
a comment, a preprocessor line or a closing brace, whose parentheses lead
to a '{' before any ';') to its closing brace at column 0; its length
counts both. Comments and string literals are blanked first, so braces in
them do not count. Prints FILE:LINE: NAME: N lines for each one over the
limit and exits 1 if there is one.

ALLOWED names the functions left over the limit on purpose, with why.

  tests/check_function_length.py [SRC_DIR] [--max N]   (default: src/, 150)
"""
import os
import re
import sys

EXTS = (".c", ".h", ".cu", ".cuh")
# GPU kernels: a cut moves registers and inlining, so it waits for a GPU
# build and the benchmarks before and after.
ALLOWED = {
    ("backends/cuda/gemm_sm90.cuh", "gemm_kernel"),
    ("backends/cuda/attention_mma.cu", "fwd_kernel"),
    ("backends/cuda/attention_mma.cu", "bwd_dkdv_kernel"),
    ("backends/cuda/attention_ws.cu", "fwd_ws_kernel"),
}


def blank(text):
    """text with comments and string and character literals replaced by
    spaces (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(q + " " * max(0, j - i - 2) + (q if j - i >= 2 else ""))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def functions(text):
    """(first line, name, lines) of every function of a file."""
    lines = blank(text).split("\n")
    found, i = [], 0
    while i < len(lines):
        l = lines[i]
        if not l or l[0] in " \t#}" or "(" not in l or re.match(r"[^(]*=", l):
            i += 1
            continue
        # the signature: up to the first '{' or ';' outside parentheses
        depth, j, body = 0, i, None
        while j < len(lines) and body is None:
            for c in lines[j]:
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                elif depth == 0 and c == ";":
                    body = False
                    break
                elif depth == 0 and c == "{":
                    body = True
                    break
            if body is None:
                j += 1
                if j < len(lines) and lines[j][:1] not in ("", " ", "\t", "{", "_") and "(" not in lines[j]:
                    break  # a new top-level item: this was no function
        if not body:
            i = max(j, i) + 1
            continue
        # the single-line function closes on the line it opens
        rest = lines[j][lines[j].index("{"):]
        if j == i and rest.count("{") == rest.count("}"):
            i += 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith("}"):
            k += 1
        sig = " ".join(lines[i : j + 1])
        names = [x for x in re.findall(r"(\w+)\s*\(", sig) if x not in ("__launch_bounds__", "__attribute__")]
        name = names[0] if names else "?"
        m = re.search(r"\bCAT\(\s*(\w+)", sig)  # CAT(run_tile, SFX): a name pasted per type
        if m:
            name = m.group(1)
        found.append((i + 1, name, k - i + 1))
        i = k + 1
    return found


def main():
    args = sys.argv[1:]
    limit = 150
    if "--max" in args:
        k = args.index("--max")
        limit = int(args[k + 1])
        del args[k : k + 2]
    src = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src"))
    over = []
    for dirpath, dirnames, names in os.walk(src):
        dirnames.sort()
        for f in sorted(names):
            if not f.endswith(EXTS):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for line, name, n in functions(text):
                if n > limit and (rel, name) not in ALLOWED:
                    over.append(f"src/{rel}:{line}: {name}: {n} lines (at most {limit})")
    for o in over:
        print(f"check_function_length: {o}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
