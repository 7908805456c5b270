# The start the CLI tests share, sourced with the test's arguments
# (PATH/TO/coda WORKDIR ...) before anything else:
#
#   # shellcheck source=tests/cli/setup.sh
#   . "$(dirname "$0")/setup.sh"
#
# It sets coda (made absolute: the test runs inside WORKDIR) and work, and
# makes WORKDIR afresh and enters it, so that a test starts from nothing of
# an earlier run's.
set -u
# shellcheck disable=SC2034 # coda: for the sourcing test
coda=$1
case $coda in /*) ;; *) coda=$PWD/$coda ;; esac
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

# write_corpus: corpus/text, 300 short documents in the fortune format
# ("%" lines between them), alike but each numbered, so that a byte-level
# model learns them within a few dozen steps.
write_corpus() {
  mkdir -p corpus
  i=0
  while [ $i -lt 300 ]; do
    echo "The quick brown fox $i jumps over the lazy dog. Pack my box with five dozen jugs."
    echo "%"
    i=$((i + 1))
  done >corpus/text
}
