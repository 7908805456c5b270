#!/bin/bash
# Fetches the CODA paper authors' released kernels (coda-kernels 0.2, on
# quack-kernels 0.6.1 and the CuTe DSL 4.6.0, CUDA 13 flavour) and the
# packages they need that the GPU machine's image lacks or may hold in other
# versions into .whl/coda/ (git-ignored; never commit wheels), for
# coda_ref_fused.py. Wheels over 1 MiB are recompressed with LZMA (pip
# installs LZMA zip members like any other). A file already in .whl/coda/ is
# kept, so a second run downloads nothing.
#
# The set is larger than one call carries (about 50 MB besides the tree), so
# it is then split into .whl/coda1/ and .whl/coda2/ of at most SPLIT_MB
# (default 45) MB each; a wheel larger than that is cut into byte parts
# (NAME.whl.partIofN) that run_device.sh joins on the GPU machine. The two
# folders go in two successive calls on the same warm machine (the second
# within the machine's idle window), the first only staging its files:
#
#   call 1, carry [".whl/coda1"]:
#     bash bench/fused/run_device.sh stage
#   call 2, carry [".carry/fused", ".whl/coda2"]:
#     bash bench/fused/run_device.sh .carry/fused coda_ref
#
# When the whole set fits (SPLIT_MB large enough), .whl/coda1/ alone holds it
# and call 2 alone, with .whl/coda1 carried, does everything.
#
#   bash bench/fused/fetch_coda_ref.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
git check-ignore -q .whl/coda || { echo ".whl/ is not git-ignored"; exit 1; }
D=.whl/coda
SPLIT_MB=${SPLIT_MB:-45}
mkdir -p "$D"
PKGS=(
  coda-kernels==0.2
  quack-kernels==0.6.1
  nvidia-cutlass-dsl==4.6.0
  nvidia-cutlass-dsl-libs-base==4.6.0
  nvidia-cutlass-dsl-libs-core==4.6.0
  nvidia-cutlass-dsl-libs-cu13==4.6.0
  nvidia-cuda-nvdisasm==13.5.37
  apache-tvm-ffi==0.1.15.post2
  torch-c-dlpack-ext==0.1.5
  einops==0.8.2
  cuda-python==13.4.4
  cuda-bindings==13.5.0
  cuda-pathfinder==1.9.1
)
# one pip call per package, so that a file already here is not fetched again
for p in "${PKGS[@]}"; do
  n=${p%%==*}; v=${p#*==}
  if ls "$D/${n//-/_}-$v-"*.whl > /dev/null 2>&1; then continue; fi
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$D" "$p"
done
python3 - "$D" "$SPLIT_MB" <<'PY'
import glob, os, shutil, sys, zipfile
d, limit = sys.argv[1], int(sys.argv[2]) * 10**6
for w in sorted(glob.glob(f"{d}/*.whl")):
    if os.path.getsize(w) < 1 << 20:
        continue
    with zipfile.ZipFile(w) as z:
        if all(i.compress_type == zipfile.ZIP_LZMA for i in z.infolist() if i.file_size > 1 << 20):
            continue  # already recompressed
        with zipfile.ZipFile(w + ".tmp", "w", compression=zipfile.ZIP_LZMA) as out:
            for info in z.infolist():
                out.writestr(info, z.read(info), compress_type=zipfile.ZIP_LZMA)
    os.replace(w + ".tmp", w)
# the carried folders: coda1 filled first, biggest wheels first
for f in ("coda1", "coda2"):
    shutil.rmtree(f"{os.path.dirname(d)}/{f}", ignore_errors=True)
wheels = sorted(glob.glob(f"{d}/*.whl"), key=os.path.getsize, reverse=True)
total = sum(map(os.path.getsize, wheels))
folders = {"coda1": [], "coda2": []}
room = {"coda1": limit, "coda2": limit}
for w in wheels:
    size = os.path.getsize(w)
    if size > limit:  # byte parts, the first filling coda1's room
        cut = room["coda1"]
        if size - cut > room["coda2"]:
            sys.exit(f"{w}: {size / 1e6:.1f} MB does not fit two folders of {limit / 1e6:.0f} MB")
        folders["coda1"].append((w, 0, cut, 1))
        folders["coda2"].append((w, cut, size, 2))
        room["coda1"], room["coda2"] = 0, room["coda2"] - (size - cut)
        continue
    f = "coda1" if size <= room["coda1"] else "coda2"
    if size > room[f]:
        sys.exit(f"the set ({total / 1e6:.1f} MB) does not fit two folders of {limit / 1e6:.0f} MB")
    folders[f].append((w, 0, size, 0))
    room[f] -= size
names = sorted(os.path.basename(w) for w in wheels)
for f, items in folders.items():
    if not items:
        continue
    out = f"{os.path.dirname(d)}/{f}"
    os.makedirs(out)
    with open(f"{out}/MANIFEST", "w") as m:  # the whole set, to tell when it is complete
        m.write("\n".join(names) + "\n")
    for w, a, b, part in items:
        name = os.path.basename(w)
        if part == 0:
            shutil.copy(w, out)
            continue
        with open(w, "rb") as src, open(f"{out}/{name}.part{part}of2", "wb") as dst:
            src.seek(a)
            dst.write(src.read(b - a))
    size = sum(os.path.getsize(f"{out}/{x}") for x in os.listdir(out))
    print(f".whl/{f}: {len(items)} files, {size / 1e6:.1f} MB")
print(f"{d}: {len(wheels)} wheels, {total / 1e6:.1f} MB")
PY
ls -l "$D"
