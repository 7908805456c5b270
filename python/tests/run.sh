#!/bin/sh
# Builds and installs the Python package (CPU backend) into a scratch folder
# with pip, then runs its pytest suite against that install.
#   python/tests/run.sh WORKDIR
# Needs python3 with pip, numpy, pytest and scikit-build-core (scripts/
# install-deps.sh installs them); without them it exits 77 (skipped),
# except under CI, where that is a failure. The torch tests skip themselves
# where PyTorch is not installed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$here")
work=${1:-$pkg/build/test}
py=${PYTHON:-python3}
if ! "$py" -c "import numpy, pytest, scikit_build_core" 2>/dev/null; then
  echo "python tests: $py with numpy, pytest and scikit-build-core not found (scripts/install-deps.sh installs them)"
  if [ "${CI:-}" = true ]; then exit 1; fi
  exit 77
fi
rm -rf "$work/site"
mkdir -p "$work"
# CPU backend only: the suite runs without a GPU, and a CUDA build is long.
CODA_PYTHON_CPU=1 CMAKE_BUILD_PARALLEL_LEVEL=${CODA_JOBS:-2} \
  "$py" -m pip install --no-build-isolation --no-deps --quiet --disable-pip-version-check \
  --config-settings=build-dir="$work/build" --target "$work/site" "$pkg"
cd "$work"
PYTHONPATH="$work/site" "$py" -m pytest -p no:cacheprovider -q -rs "$here"
