#!/bin/sh
# The programs and commands of the docs run as the docs say:
#  - a code block whose first line is `# NAME.coda` is a program: it is
#    written to WORKDIR/NAME.coda, must pass `coda check`, and where
#    programs/examples/NAME.coda exists, the two must have the same
#    canonical text (the docs show the shipped file);
#  - a code block of `coda ...` (and `mkdir ...`) lines is run in WORKDIR
#    (with programs/ linked there), continuation lines joined, a trailing
#    `# comment` dropped; commands that need files the docs do not give
#    (`--input`), a GPU (`--gpu`) or that elide (`...`) are skipped;
#  - a block of one command followed directly by a block that is neither
#    is that command's output: each of its lines must appear in what the
#    command prints (the tiny errors of an `ok` line masked, they follow
#    the C library's last bits), and the exit status must be 1 when it
#    ends in FAIL or a `coda ...:` error line, else 0. Without an output
#    block the status must be 0.
#   sh tests/cli/doc_examples.sh PATH/TO/coda PROGRAMS_DIR WORKDIR DOC.md...
set -u
coda=$1
progs=$2
work=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
ln -s "$progs" "$work/programs"
fails=0 nprog=0 ncmd=0 nout=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
mask() { sed 's/max|bwd-fd| [^ ]*  rel [^ ]* at ([^)]*)  ok$/max|bwd-fd| -  rel - at -  ok/' "$1"; }

for doc in "$@"; do
  name=$(basename "$doc")
  bd="$work/blocks.$name"
  mkdir -p "$bd"
  # blocks as files 1, 2, ...; adj lists the blocks preceded by blank lines only
  awk -v d="$bd" '
    /^```/ { if (inb) { close(f); inb = 0; gap = 1; next }
             n++; f = d "/" n; inb = 1; if (gap) print n > (d "/adj"); printf "" > f; next }
    inb { print > f; next }
    /^[ \t]*$/ { next }
    { gap = 0 }' "$doc"
  touch "$bd/adj"
  nb=$(ls "$bd" | grep -c '^[0-9]*$')
  i=1
  while [ "$i" -le "$nb" ]; do
    b="$bd/$i"
    first=$(head -n 1 "$b")
    case "$first" in
    "# "*.coda*)
      prog=$(echo "$first" | sed 's/^# \([A-Za-z0-9_]*\.coda\).*/\1/')
      cp "$b" "$work/$prog"
      nprog=$((nprog + 1))
      before=$fails
      if ! "$coda" check "$work/$prog" >/dev/null 2>"$work/err.txt"; then
        fail "$name: $prog does not pass coda check: $(cat "$work/err.txt")"
      elif [ -f "$progs/examples/$prog" ]; then
        "$coda" check --text "$work/$prog" >"$work/a.txt" 2>&1
        "$coda" check --text "$progs/examples/$prog" >"$work/b.txt" 2>&1
        cmp -s "$work/a.txt" "$work/b.txt" || fail "$name: $prog differs from programs/examples/$prog"
      fi
      [ "$fails" -eq "$before" ] && echo "ok: $name: program $prog"
      ;;
    "coda "* | "mkdir "*)
      # one command a line
      awk '{ if (sub(/\\[ \t]*$/, "")) { c = c $0; next } print c $0; c = "" }' "$b" >"$work/cmds"
      ncmds=$(grep -c . "$work/cmds")
      nxt=$((i + 1))
      expect=""
      if [ "$ncmds" -eq 1 ] && [ -f "$bd/$nxt" ] && grep -qx "$nxt" "$bd/adj"; then
        case "$(head -n 1 "$bd/$nxt")" in
        "coda "* | "mkdir "* | "# "*.coda*) ;;
        *) expect="$bd/$nxt" ;;
        esac
      fi
      while IFS= read -r cmd; do
        cmd=$(echo "$cmd" | sed 's/  *# .*$//; s/[ \t]*$//; s/  */ /g')
        case "$cmd" in
        *...* | *--gpu* | *--input*) echo "skipped: $name: $cmd"; continue ;;
        mkdir\ *) (cd "$work" && sh -c "$cmd") || fail "$name: $cmd"; continue ;;
        esac
        ncmd=$((ncmd + 1))
        (cd "$work" && eval "\"\$coda\" ${cmd#coda }") >"$work/out.txt" 2>&1
        rc=$?
        want=0
        if [ -n "$expect" ]; then
          last=$(grep . "$expect" | tail -n 1)
          case "$last" in FAIL | "coda "*:*) want=1 ;; esac
          mask "$work/out.txt" >"$work/got.txt"
          mask "$expect" | grep -v '\.\.\.' | while IFS= read -r line; do
            [ -z "$line" ] && continue
            grep -qxF -- "$line" "$work/got.txt" || echo "$line"
          done >"$work/missing.txt"
          nout=$((nout + 1))
          if [ -s "$work/missing.txt" ]; then
            fail "$name: $cmd: the output differs from the docs' block"
            sed 's/^/  docs | /' "$work/missing.txt"
            sed 's/^/  got  | /' "$work/out.txt" | head -20
          fi
        fi
        if [ "$rc" -ne "$want" ]; then
          fail "$name: $cmd -> exit $rc, the docs say $want"
          sed 's/^/  | /' "$work/out.txt" | head -20
        else
          echo "ok: $name: $cmd -> $rc"
        fi
      done <"$work/cmds"
      ;;
    esac
    i=$((i + 1))
  done
done
echo "$nprog programs, $ncmd commands, $nout outputs compared"
# a parser that finds nothing must not pass
[ "$nprog" -gt 0 ] && [ "$ncmd" -gt 0 ] && [ "$nout" -gt 0 ] || fail "nothing found to check"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
