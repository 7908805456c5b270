#!/bin/bash
# coda train on two GPUs started as torchrun starts it (the rank
# environment), run from the repository root on a machine with at least two
# sm_90 GPUs, after tests/gpu/train_dp_prepare.sh (the same pack: d512 at
# batch 16 per GPU):
#
#   tests/gpu/train_launch_gpu.sh PACK_DIR        (default .carry/gdp)
#
#  (a) 2 joined ranks (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
#      set by this script; NCCL id through coda's rendezvous), 10 d512 steps
#      at batch 16: the loss log equals that of `--ranks 2` byte for byte
#      (the same NCCL collectives on the same GPUs; train_dp_gpu.sh (b) shows
#      that 2-GPU runs repeat bit for bit).
#  (b) the same with LOCAL_RANK swapped (rank 0 on GPU 1): both exit 0 and
#      the losses agree within 1e-3 relative (the GPUs are alike).
#  (c) rank 1 killed mid-run: rank 0 ends within 60 s (the watchdog, with
#      CODA_COMM_TIMEOUT=20), naming rank 1.
#  (d) if PyTorch's torchrun is installed: `torchrun --standalone
#      --nproc-per-node 2 --no-python coda train ...` gives the log of (a).
# Exit 0 pass, 1 fail, 77 when there are fewer than two GPUs.
set -u
cd "$(dirname "$0")/../.."
P=${1:-.carry/gdp}
CODA=$P/build/coda
export CODA_CACHE_DIR=$(cd "$P/cache" && pwd)
[ -x "$CODA" ] || { echo "no $CODA (run tests/gpu/train_dp_prepare.sh first)"; exit 2; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NGPU" -ge 2 ] || { echo "need two GPUs: skipped"; exit 77; }
if [ -z "${CODA_NCCL_LIB:-}" ]; then
  d=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) &&
    [ -f "$d/lib/libnccl.so.2" ] && export CODA_NCCL_LIB=$d/lib/libnccl.so.2
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' > "$W/corpus/docs"
timeout 60 "$CODA" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" >/dev/null || { echo "corpus failed"; exit 1; }
D512="--config d512 --device gpu --data $W/data --val-every 0 --val-batches 0 --warmup 10 --lr 2e-3 --seed 11 --batch 16 --quiet"

# joined OUT GPU_OF_RANK0 GPU_OF_RANK1 EXTRA...: two ranks, waits for both
joined() {
  local out=$1 g0=$2 g1=$3 pt
  shift 3
  pt=$(port)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=$g0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$pt \
    timeout 300 "$CODA" train $D512 --out "$W/$out" "$@" > "$W/$out.0.txt" 2>&1 &
  local p0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=$g1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$pt \
    timeout 300 "$CODA" train $D512 --out "$W/$out" "$@" > "$W/$out.1.txt" 2>&1 &
  local p1=$!
  pids="$p0 $p1"
}

echo "== (a) 2 joined ranks = --ranks 2"
timeout 300 "$CODA" train $D512 --steps 10 --ranks 2 --out "$W/fork" > "$W/fork.txt" 2>&1 || { fail "(a) --ranks 2"; tail -5 "$W/fork.txt"; }
joined join 0 1 --steps 10
set -- $pids; wait "$1"; a=$?; wait "$2"; b=$?
if [ $a -ne 0 ] || [ $b -ne 0 ]; then fail "(a) joined ranks: statuses $a $b"; tail -5 "$W"/join.*.txt
elif cmp -s "$W/fork/loss.csv" "$W/join/loss.csv"; then echo "(a) byte-identical loss logs"
else fail "(a) the loss logs differ"; paste -d' ' "$W/fork/loss.csv" "$W/join/loss.csv" | head -12; fi

echo "== (b) LOCAL_RANK swapped"
joined swap 1 0 --steps 10
set -- $pids; wait "$1"; a=$?; wait "$2"; b=$?
if [ $a -ne 0 ] || [ $b -ne 0 ]; then fail "(b) swapped: statuses $a $b"; tail -5 "$W"/swap.*.txt
else
  paste -d, "$W/join/loss.csv" "$W/swap/loss.csv" | awk -F, 'NR > 1 { d = $2 - $7; if (d < 0) d = -d; r = d / $2; if (r > m) m = r }
    END { printf "(b) max rel %.2e (limit 1e-3)\n", m; exit !(NR == 11 && m <= 1e-3) }' || fail "(b) losses differ"
fi

echo "== (c) rank 1 killed"
export CODA_COMM_TIMEOUT=20
joined kill 0 1 --steps 100000
unset CODA_COMM_TIMEOUT
set -- $pids
# until rank 0 has logged two steps (at most 5 min)
t=0; while [ $t -lt 1200 ] && [ "$(wc -l < "$W/kill/loss.csv" 2>/dev/null || echo 0)" -lt 3 ]; do sleep 0.25; t=$((t + 1)); done
start=$(date +%s)
pkill -9 -P "$2" 2>/dev/null; kill -9 "$2" 2>/dev/null  # coda (the child of timeout), then timeout
wait "$1"; a=$?
took=$(($(date +%s) - start))
if [ $a -ne 0 ] && [ $took -le 60 ] && grep -q "rank 1" "$W/kill.0.txt"; then echo "(c) rank 0 ended in $took s: $(grep 'rank 1' "$W/kill.0.txt" | tail -1)"
else fail "(c) rank 0: status $a after $took s"; tail -5 "$W/kill.0.txt"; fi
wait "$2" 2>/dev/null

echo "== (d) torchrun"
if command -v torchrun >/dev/null 2>&1; then
  timeout 300 torchrun --standalone --nproc-per-node 2 --no-python "$CODA" train $D512 --steps 10 --out "$W/torchrun" > "$W/torchrun.txt" 2>&1 ||
    { fail "(d) torchrun"; tail -8 "$W/torchrun.txt"; }
  if cmp -s "$W/fork/loss.csv" "$W/torchrun/loss.csv"; then echo "(d) torchrun: byte-identical loss log"
  else fail "(d) torchrun's loss log differs"; fi
else
  echo "(d) no torchrun: skipped"
fi
if [ $FAIL = 0 ]; then echo "train_launch_gpu: PASS"; else echo "train_launch_gpu: FAIL"; exit 1; fi
