#!/bin/sh
# The layers of src/ run one way: base -> lang -> backends -> api -> nn ->
# dist -> io -> data -> model -> store -> infer | train -> tools. A file may
# include headers of its own layer and of the layers below it, never above.
# Further:
#   - infer and train share a rank but do not include each other;
#   - backends/cpu and backends/cuda do not include each other;
#   - above the backends only the table (backends/backend.h) is named, and
#     only by the api layer: no layer above it names a backend file;
#   - CODA_HAVE_CUDA is tested only where the CUDA table is registered
#     (backends/registry.c) and inside the CUDA backend itself;
#   - the tools (the CLI) use the public headers only, and their own;
#   - getenv appears only in base/knobs.c.
# Prints every violation and exits 1 if there is one.
#
#   tests/check_layers.sh [SRC_DIR]     (default: the src/ beside this script)
set -u
src=${1:-$(dirname "$0")/../src}
cd "$src" || exit 2
status=0

rank() { # the layer of a path under src/ ("" for an unknown folder)
  case $1 in
    base/*) echo 0 ;;
    lang/*) echo 1 ;;
    backends/*) echo 2 ;;
    api/*) echo 3 ;;
    nn/*) echo 4 ;;
    dist/*) echo 5 ;;
    io/*) echo 6 ;;
    data/*) echo 7 ;;
    model/*) echo 8 ;;
    store/*) echo 9 ;;
    infer/* | train/*) echo 10 ;;
    tools/*) echo 11 ;;
    *) echo "" ;;
  esac
}

bad() {
  echo "check_layers: $*"
  status=1
}

files=$(find . -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sed 's|^\./||' | sort)
for f in $files; do
  r=$(rank "$f")
  [ -n "$r" ] || { bad "$f: in no layer (base lang backends api nn dist io data model store infer train tools)"; continue; }
  dir=$(dirname "$f")
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    case $inc in
      coda.h | coda_*.h) continue ;; # the public headers
      */*) target=$inc ;;
      *) target=$dir/$inc ;; # a file of the same folder
    esac
    [ -f "$target" ] || [ -f "$dir/$inc" ] || continue # a generated or system file
    t=$(rank "$target")
    [ -n "$t" ] || continue
    if [ "$t" -gt "$r" ]; then
      bad "$f includes $inc: layer $(dirname "$target") is above $(dirname "$f")"
    fi
    case $f:$target in
      backends/cpu/*:backends/cuda/* | backends/cuda/*:backends/cpu/*)
        bad "$f includes $inc: one backend includes another" ;;
    esac
    case $f:$target in
      infer/*:train/* | train/*:infer/*)
        bad "$f includes $inc: the decoder and the trainer do not include each other" ;;
    esac
    case $f:$target in
      tools/*:tools/*) ;;
      tools/*:*) bad "$f includes $inc: the tools use the public headers only" ;;
    esac
    if [ "$r" -gt 2 ]; then
      case $target in
        backends/backend.h) [ "$r" -eq 3 ] || bad "$f includes $inc: only the api layer calls the backend table" ;;
        backends/*) bad "$f includes $inc: a backend header above the backends" ;;
      esac
    fi
  done
  if grep -q 'CODA_HAVE_CUDA' "$f"; then
    case $f in
      backends/registry.c | backends/cuda/*) ;;
      *) bad "$f tests CODA_HAVE_CUDA (only backends/registry.c may)" ;;
    esac
  fi
  if grep -q 'getenv[[:space:]]*(' "$f" && [ "$f" != base/knobs.c ]; then
    bad "$f reads the environment (only base/knobs.c may)"
  fi
done
[ $status -eq 0 ] && echo "check_layers: $(echo "$files" | wc -l) files, every include runs down the layers"
exit $status
