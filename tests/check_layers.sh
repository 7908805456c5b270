#!/bin/sh
# The layers of src/ run one way: base -> lang -> backends -> api -> nn ->
# dist -> io -> data -> model -> store -> infer | train -> tools. A file may
# include headers of its own layer and of the layers below it, never above.
# Further:
#   - infer and train share a rank but do not include each other;
#   - backends/cpu and backends/cuda do not include each other;
#   - above the backends only the table (backends/backend.h) and its feature
#     tables (backends/train_ops.h, backends/decode_ops.h) are named, and
#     only by the api layer: no layer above it names a backend file;
#   - CODA_HAVE_CUDA is tested only where the CUDA table is registered
#     (backends/registry.c) and inside the CUDA backend itself;
#   - the tools (the CLI) use the public headers only, and their own;
#   - getenv appears only in base/knobs.c.
# With --calls, the same rule on calls instead, read from the symbol tables
# of a build's objects (nm): every symbol an object of the library or the
# tool uses and another of them defines is defined in the object's own
# layer or below; the CPU and CUDA backends call nothing of each other, and
# above the api layer nothing defined in backends/ is called. An object maps
# back to its source through CMake's object folders
# (CMakeFiles/<target>.dir/src/<path>.o); the embedded built-in programs
# (generated/programs_embedded.c) are the language layer's; an object whose
# source is gone from SRC_DIR (a file moved since the build) is left out.
# Prints every violation and exits 1 if there is one.
#
#   tests/check_layers.sh [SRC_DIR]     (default: the src/ beside this script)
#   tests/check_layers.sh --calls BUILD_DIR [SRC_DIR]
set -u
mode=includes
if [ "${1:-}" = --calls ]; then
  mode=calls
  build=${2:?usage: check_layers.sh --calls BUILD_DIR [SRC_DIR]}
  src=${3:-$(dirname "$0")/../src}
  [ -d "$src" ] || { echo "check_layers: $src: no such folder"; exit 2; }
else
  src=${1:-$(dirname "$0")/../src}
  cd "$src" || exit 2
fi
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

# --calls: "D symbol source" for what each object defines (global symbols),
# "U symbol source" for what it uses, then one pass over both.
if [ "$mode" = calls ]; then
  command -v nm >/dev/null 2>&1 || { echo "check_layers: nm not found"; exit 2; }
  objs=$(find "$build/CMakeFiles/coda_obj.dir" "$build/CMakeFiles/coda.dir" -name '*.o' 2>/dev/null | sort)
  [ -n "$objs" ] || { echo "check_layers: no objects under $build/CMakeFiles/{coda_obj,coda}.dir (build first)"; exit 2; }
  table=$(for o in $objs; do
    f=${o#*/CMakeFiles/*.dir/}
    f=${f%.o}
    case $f in
      src/*) f=${f#src/}; [ -f "$src/$f" ] || continue ;;
      generated/programs_embedded.c) f=lang/generated/programs_embedded.c ;;
    esac
    nm -P "$o" | awk -v f="$f" '
      $2 == "U" || $2 == "w" || $2 == "v" { print "U", $1, f; next }
      $2 ~ /^[A-Z]$/ { print "D", $1, f }'
  done)
  echo "$table" | awk '
    function rank(p) {
      if (p ~ /^base\//) return 0
      if (p ~ /^lang\//) return 1
      if (p ~ /^backends\//) return 2
      if (p ~ /^api\//) return 3
      if (p ~ /^nn\//) return 4
      if (p ~ /^dist\//) return 5
      if (p ~ /^io\//) return 6
      if (p ~ /^data\//) return 7
      if (p ~ /^model\//) return 8
      if (p ~ /^store\//) return 9
      if (p ~ /^(infer|train)\//) return 10
      if (p ~ /^tools\//) return 11
      return -1 # keep in step with rank() below
    }
    function dir(p) { sub(/\/[^\/]*$/, "", p); return p }
    $1 == "D" {
      r = rank($3)
      if (!($2 in def) || r < rank(def[$2])) def[$2] = $3
      if (r < 0 && !($3 in unknown)) { unknown[$3] = 1; print "check_layers: " $3 ": in no layer"; bad = 1 }
      next
    }
    { use[++n] = $2; by[n] = $3 }
    END {
      for (i = 1; i <= n; i++) {
        s = use[i]; f = by[i]
        if (!(s in def)) continue # the C library, CUDA, ...
        d = def[s]
        if (d == f) continue
        rf = rank(f); rd = rank(d)
        if (rd > rf)
          why = "layer " dir(d) " is above " dir(f)
        else if ((f ~ /^backends\/cpu\// && d ~ /^backends\/cuda\//) || (f ~ /^backends\/cuda\// && d ~ /^backends\/cpu\//))
          why = "one backend calls another"
        else if (rf > 3 && d ~ /^backends\//)
          why = "only the api layer calls the backends"
        else if ((f ~ /^infer\// && d ~ /^train\//) || (f ~ /^train\// && d ~ /^infer\//))
          why = "infer and train share a layer and call neither the other"
        else
          continue
        print "check_layers: " f " calls " s " (" d "): " why
        bad = 1
      }
      if (!bad) print "check_layers: every call between the objects runs down the layers"
      exit bad
    }'
  exit $?
fi

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
        backends/backend.h | backends/train_ops.h | backends/decode_ops.h)
          [ "$r" -eq 3 ] || bad "$f includes $inc: only the api layer calls the backend table" ;;
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
