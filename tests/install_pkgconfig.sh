#!/bin/sh
# coda.pc, installed: `cmake --install BUILD --prefix P` into a temporary
# prefix, then a small C program (a CPU context, a token shard prepared
# from text: the tokenizer's utf8proc, zlib's CRC-32, OpenMP) compiled and
# linked through pkg-config
#   1. shared: `pkg-config --cflags --libs coda`, run from the prefix;
#   2. static: the prefix moved elsewhere (the .pc file is relocatable),
#      libcoda.so removed, `pkg-config --static --cflags --libs coda`
#      (Requires.private: jansson; Libs.private: zlib, utf8proc, OpenMP
#      and, in a CUDA build, the static CUDA runtime), run; no libcoda.so
#      among its NEEDED entries.
#
#   sh tests/install_pkgconfig.sh BUILD_DIR CC WORKDIR
set -eu
build=$1
cc=$2
work=$3
fail() { echo "FAIL: $*"; exit 1; }
command -v pkg-config >/dev/null 2>&1 || fail "no pkg-config on PATH (scripts/install-deps.sh installs it)"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
work=$(pwd)
cmake --install "$build" --prefix "$work/p1" >install.txt 2>&1 || { cat install.txt; fail "cmake --install"; }
pc=$(find "$work/p1" -name coda.pc | head -1)
[ -n "$pc" ] || fail "no coda.pc under the prefix"
pcdir=$(dirname "$pc")
cat >prog.c <<'EOC'
#include <coda_train.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  coda_context ctx;
  if (coda_context_create(NULL, &ctx) != CODA_OK) return 3;
  coda_data_options o = coda_data_default_options();
  o.path = argv[1];
  uint64_t ntr = 0, nva = 0;
  uint32_t vocab = 0;
  coda_status s = coda_prepare_data(ctx, &o, argv[2], &ntr, &nva, &vocab);
  if (s != CODA_OK) {
    fprintf(stderr, "prepare: %s\n", coda_last_error(ctx));
    return 4;
  }
  printf("%s %llu %llu %u\n", coda_status_string(CODA_OK), (unsigned long long)ntr,
         (unsigned long long)nva, vocab);
  coda_context_destroy(ctx);
  return 0;
}
EOC
i=0
while [ $i -lt 100 ]; do echo "line $i of a small corpus of text"; i=$((i + 1)); done >c.txt
want="ok $(($(wc -c <c.txt) - ($(wc -c <c.txt) + 19) / 20)) $((($(wc -c <c.txt) + 19) / 20)) 256"
# 1. shared, from the first prefix
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs coda) || fail "pkg-config --libs"
inc=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir coda)
[ "$(cd "$inc" && pwd)" = "$work/p1/include" ] || fail "includedir $inc is not the prefix's"
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir coda)
# shellcheck disable=SC2086
"$cc" prog.c -o prog_shared $flags -Wl,-rpath,"$libdir" 2>cc1.txt || { cat cc1.txt; fail "shared link: $flags"; }
got=$(./prog_shared c.txt out1) || fail "the shared program failed"
[ "$got" = "$want" ] || fail "shared: '$got', wanted '$want'"
readelf -d prog_shared | grep -q 'NEEDED.*libcoda\.so' || fail "the shared program does not load libcoda.so"
echo "ok: shared: $flags"
# 2. static, from the prefix moved elsewhere, libcoda.so gone
mv "$work/p1" "$work/p2"
pcdir2=$(dirname "$(find "$work/p2" -name coda.pc | head -1)")
find "$work/p2" -name 'libcoda.so*' -exec rm {} +
prefix=$(PKG_CONFIG_PATH=$pcdir2 pkg-config --variable=prefix coda)
[ "$(cd "$prefix" && pwd)" = "$work/p2" ] || fail "moved: prefix $prefix is not the new place"
sflags=$(PKG_CONFIG_PATH=$pcdir2 pkg-config --static --cflags --libs coda) || fail "pkg-config --static"
# shellcheck disable=SC2086
"$cc" prog.c -o prog_static $sflags 2>cc2.txt || { cat cc2.txt; fail "static link: $sflags"; }
got=$(./prog_static c.txt out2) || fail "the static program failed"
[ "$got" = "$want" ] || fail "static: '$got', wanted '$want'"
if readelf -d prog_static | grep -q 'NEEDED.*libcoda'; then fail "the static program needs libcoda.so"; fi
cmp -s out1/val.tok out2/val.tok || fail "the two programs' shards differ"
echo "ok: static: $sflags"
