#!/bin/sh
# coda train started as torchrun and srun start it: this script starts the
# processes of a job itself, with the rank environment on 127.0.0.1 and a
# free port, and checks
#   - 2 and 3 joined ranks give the losses, gradient norms and validation
#     losses of one process at the same global batch (within 1e-6 relative,
#     the bound of test_train_dp.c), and exactly those of `--ranks N`
#     (forked ranks: the same sums in the same order over another transport);
#     the Slurm variables give the same as torchrun's;
#   - a rank killed, stopped or ending early ends the job on every rank
#     within the collective timeout, with a message naming it; ranks with
#     different training options refuse to train;
#   - the rendezvous times out naming the ranks that did not come, and
#     refuses ranks that disagree (world size, two claims on one rank);
#   - inconsistent environments are refused with a reason (status 2).
#
#   sh tests/cli/launch_train.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
ok() { echo "ok: $*"; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
      SLURM_PROCID SLURM_NTASKS SLURM_LOCALID TORCHELASTIC_USE_AGENT_STORE CODA_COMM_TIMEOUT

# A port nothing listens on now (the kernel's choice; else one from the pid).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + ($$ * 7 + ${port_salt:-0}) % 30000))
  port_salt=$((${port_salt:-0} + 1))
}

write_corpus
# the reference engine (fp32, sums in double): one process and N ranks then
# differ only in where the per-sequence gradients are added (see
# test_train_dp.c; the plan engine's bf16 weights would need 1e-3)
small="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --val-batches 2 --val-every 3 --threads 1 --seed 3 --engine reference"
"$coda" train $small --corpus corpus --out prep --prepare >/dev/null 2>err.txt || { echo "FAIL: prepare"; cat err.txt; exit 1; }
data=prep/data

# job N PORT OUT EXTRA...: starts ranks 0 .. N-1 in the background (torchrun's
# variables), their pids in pids, output in OUT.r.{out,err}
job() {
  n=$1 port=$2 out=$3
  shift 3
  pids=""
  r=0
  while [ $r -lt "$n" ]; do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$coda" train $small --data $data --out "$out" "$@" >"$out.$r.out" 2>"$out.$r.err" </dev/null &
    pids="$pids $!"
    r=$((r + 1))
  done
}
# waits for the ranks of the last job; statuses in rcs
wait_job() {
  rcs=""
  for p in $pids; do
    wait "$p"
    rcs="$rcs $?"
  done
}

# compare A B REL: loss, grad_norm and val_loss of two loss.csv within REL
compare() {
  awk -F, -v rel="$3" '
    FNR == 1 { next }
    NR == FNR { a[FNR] = $2 " " $4 " " $5; na = FNR; next }
    { nb = FNR
      split(a[FNR], x, " ")
      for (k = 1; k <= 3; k++) {
        v = (k == 1 ? $2 : k == 2 ? $4 : $5)
        if (v == "nan" && x[k] == "nan") continue
        if (v == "nan" || x[k] == "nan") { bad = 1; continue }
        d = v - x[k]; if (d < 0) d = -d
        r = d / (x[k] < 0 ? -x[k] : x[k]); if (r > worst) worst = r
      }
    }
    END { if (na != 7 || nb != 7 || bad) { print "rows " na " and " nb; exit 1 }
          printf "%.2e\n", worst; exit !(worst <= rel) }' "$1" "$2"
}

# 1. N joined ranks x batch 2 = one process x batch 2N = --ranks N
for n in 2 3; do
  "$coda" train $small --data $data --out one$n --batch $((2 * n)) --steps 6 --quiet >/dev/null 2>err.txt ||
    { fail "one process, batch $((2 * n))"; cat err.txt; }
  "$coda" train $small --data $data --out fork$n --batch 2 --ranks $n --steps 6 --quiet >/dev/null 2>err.txt ||
    { fail "--ranks $n"; cat err.txt; }
  job $n "$(free_port)" join$n --batch 2 --steps 6 --quiet
  wait_job
  if [ "$rcs" != "$(printf ' 0%.0s' $(seq $n))" ]; then fail "$n joined ranks: statuses$rcs"; cat join$n.*.err
  elif worst=$(compare one$n/loss.csv join$n/loss.csv 1e-6); then
    ok "$n joined ranks x 2 = 1 x $((2 * n)) within $worst relative"
  else fail "$n joined ranks x 2 vs 1 x $((2 * n)): $worst"; cat one$n/loss.csv join$n/loss.csv; fi
  if cmp -s fork$n/loss.csv join$n/loss.csv; then ok "$n joined ranks = --ranks $n exactly"
  else fail "$n joined ranks differ from --ranks $n"; cat fork$n/loss.csv join$n/loss.csv; fi
done
# weights sharded too (--zero 3): without accumulation the bits of ZeRO-1
job 2 "$(free_port)" zero3 --batch 2 --steps 6 --quiet --zero 3
wait_job
if [ "$rcs" = " 0 0" ] && cmp -s join2/loss.csv zero3/loss.csv; then ok "--zero 3: 2 joined ranks = ZeRO-1 exactly"
else fail "--zero 3: statuses$rcs"; cat zero3.*.err; fi
# Slurm's variables (srun): the same job
port=$(free_port)
for r in 0 1; do
  SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r MASTER_ADDR=localhost MASTER_PORT=$port \
    "$coda" train $small --data $data --out slurm2 --batch 2 --steps 6 --quiet >/dev/null 2>slurm$r.err &
  eval "s$r=\$!"
done
wait "$s0"; a=$?
wait "$s1"; b=$?
if [ $a -eq 0 ] && [ $b -eq 0 ] && cmp -s join2/loss.csv slurm2/loss.csv; then ok "Slurm variables = torchrun's"
else fail "Slurm variables: statuses $a $b"; cat slurm*.err; fi

# 2. failures end the job on every rank within the timeout, naming the rank.
# until_step OUT: waits (at most 60 s) until rank 0 has logged a step
until_step() {
  t=0
  while [ $t -lt 600 ] && ! grep -q '^step .* loss' "$1.0.out" 2>/dev/null; do sleep 0.1; t=$((t + 1)); done
}
# expect_end WORDS OUT RANKS...: the listed ranks failed, their messages hold WORDS
expect_end() {
  words=$1 out=$2
  shift 2
  for r in "$@"; do
    if grep -q -F -- "$words" "$out.$r.err"; then ok "$out: rank $r: $(tail -1 "$out.$r.err")"
    else fail "$out: rank $r lacks '$words'"; sed 's/^/  | /' "$out.$r.err"; fi
  done
}
export CODA_COMM_TIMEOUT=4
for victim in 2 0; do
  job 3 "$(free_port)" kill$victim --batch 2 --steps 1000000
  until_step kill$victim
  set -- $pids
  eval "vp=\${$((victim + 1))}"
  start=$(date +%s)
  kill -9 "$vp"
  wait_job
  took=$(($(date +%s) - start))
  set -- $rcs
  bad=0
  for r in 0 1 2; do [ $r -eq $victim ] && continue; eval "st=\${$((r + 1))}"; [ "$st" -ge 1 ] && [ "$st" -le 125 ] || bad=1; done
  if [ $bad -eq 0 ] && [ $took -le 30 ]; then ok "rank $victim killed: the others ended in $took s (statuses $rcs)"
  else fail "rank $victim killed: statuses $rcs after $took s"; fi
  if [ $victim -eq 2 ]; then expect_end "rank 2 is gone" kill2 0 1; else expect_end "rank 0 is gone" kill0 1 2; fi
done
# a stopped rank: the collective times out
job 3 "$(free_port)" stop --batch 2 --steps 1000000
until_step stop
set -- $pids
kill -STOP "$2"
start=$(date +%s)
wait "$1"; a=$?
wait "$3"; b=$?
took=$(($(date +%s) - start))
kill -9 "$2"; wait "$2" 2>/dev/null
if [ $a -ne 0 ] && [ $b -ne 0 ] && [ $took -le 30 ]; then ok "rank 1 stopped: the others ended in $took s"
else fail "rank 1 stopped: statuses $a $b after $took s"; fi
expect_end "no word from rank 1 for 4 s" stop 0
expect_end "rank 1 sent nothing for 4 s" stop 2
# a rank that ends early: rank 2 cannot read its data (its --data differs)
port=$(free_port)
for r in 0 1 2; do
  d=$data; [ $r -eq 2 ] && d=nosuchdata
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$coda" train $small --data $d --out early --batch 2 --steps 1000000 >early.$r.out 2>early.$r.err &
  eval "e$r=\$!"
done
start=$(date +%s)
wait "$e0"; a=$?
wait "$e1"; b=$?
wait "$e2"; c=$?
took=$(($(date +%s) - start))
if [ $a -ne 0 ] && [ $b -ne 0 ] && [ $c -ne 0 ] && [ $took -le 60 ]; then ok "rank 2 ended early: the others stopped in $took s"
else fail "rank 2 ended early: statuses $a $b $c after $took s"; fi
expect_end "rank 2 failed (exit status 1)" early 0 1
# Ctrl-C reaching one rank: every rank stops after the same step (status
# 130) and rank 0 saves
job 2 "$(free_port)" int --batch 2 --steps 1000000
until_step int
set -- $pids
kill -INT "$2"
wait_job
if [ "$rcs" = " 130 130" ] && [ -f int/checkpoint.safetensors ]; then ok "SIGINT to rank 1: both ranks stopped and rank 0 saved"
else fail "SIGINT to rank 1: statuses$rcs"; cat int.*.err; fi

# ranks with different options (here the learning rate) refuse to train
port=$(free_port)
for r in 0 1; do
  lr=3e-3; [ $r -eq 1 ] && lr=1e-3
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$coda" train $small --data $data --out lrs --batch 2 --steps 2 --lr $lr >/dev/null 2>lrs.$r.err &
  eval "l$r=\$!"
done
wait "$l0"; a=$?
wait "$l1"; b=$?
if [ $a -ne 0 ] && [ $b -ne 0 ]; then ok "different --lr refused"; else fail "different --lr: statuses $a $b"; fi
expect_end "the ranks were started with different training options" lrs 0 1

# 3. the rendezvous
export CODA_COMM_TIMEOUT=2
port=$(free_port)
RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r1 >/dev/null 2>r1.0.err
rc=$?
if [ $rc -ne 0 ] && grep -q -F "ranks 1, 2 did not join the rendezvous on port $port within 2 s" r1.0.err; then ok "rank 0 alone: $(cat r1.0.err)"
else fail "rank 0 alone: status $rc"; cat r1.0.err; fi
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r2 >/dev/null 2>r2.1.err
rc=$?
if [ $rc -ne 0 ] && grep -q -F "could not reach rank 0 at 127.0.0.1:$port within 2 s" r2.1.err; then ok "rank 1 alone: $(cat r2.1.err)"
else fail "rank 1 alone: status $rc"; cat r2.1.err; fi
# ranks that disagree: every one hears why
export CODA_COMM_TIMEOUT=20
port=$(free_port)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r3 >/dev/null 2>r3.0.err &
a0=$!
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r3 >/dev/null 2>r3.1.err
b=$?
wait $a0; a=$?
if [ $a -ne 0 ] && [ $b -ne 0 ]; then ok "world sizes 2 and 3 refused"; else fail "world sizes 2 and 3: statuses $a $b"; fi
expect_end "rank 1 has a world size of 3, rank 0 has 2" r3 0 1
port=$(free_port)
for r in 0 1 1; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r4 >/dev/null 2>>r4.$r.err &
done
wait
expect_end "two processes claim rank 1" r4 0 1
# the port taken: rank 0 says so
port=$(free_port)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CODA_COMM_TIMEOUT=6 "$coda" train $small --data $data --out r5 >/dev/null 2>/dev/null &
h=$!
sleep 1
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$coda" train $small --data $data --out r5 >/dev/null 2>r5.0.err
rc=$?
kill $h 2>/dev/null; wait $h 2>/dev/null
if [ $rc -ne 0 ] && grep -q -F "cannot listen on port $port for the rendezvous" r5.0.err; then ok "port in use: $(cat r5.0.err)"
else fail "port in use: status $rc"; cat r5.0.err; fi
unset CODA_COMM_TIMEOUT

# 4. inconsistent environments: status 2 and the reason, before any work
# env_error WORDS VAR=VALUE... -- ARGS...
env_error() {
  words=$1
  shift
  vars=""
  while [ "$1" != "--" ]; do vars="$vars $1"; shift; done
  shift
  # shellcheck disable=SC2086
  env $vars "$coda" train $small --data $data --out bad "$@" >/dev/null 2>err.txt </dev/null
  rc=$?
  if [ $rc -eq 2 ] && grep -q -F -- "$words" err.txt; then ok "$vars: $(cat err.txt)"
  else fail "$vars $*: status $rc, want 2 and '$words'"; cat err.txt; fi
}
env_error "RANK is set but WORLD_SIZE is not" RANK=0 --
env_error "WORLD_SIZE is set but RANK is not" WORLD_SIZE=2 --
env_error "RANK=2 with WORLD_SIZE=2: the rank must be below the world size" RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 --
env_error "RANK='one': need an integer" RANK=one WORLD_SIZE=2 --
env_error "WORLD_SIZE='0': need an integer in [1, " RANK=0 WORLD_SIZE=0 --
env_error "--ranks 3, but the launcher started 2 ranks (WORLD_SIZE=2)" RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 -- --ranks 3
env_error "--ranks 2, but the launcher started 1 ranks" RANK=0 WORLD_SIZE=1 -- --ranks 2
env_error "LOCAL_RANK is set but RANK and WORLD_SIZE are not" LOCAL_RANK=0 --
env_error "no MASTER_ADDR" RANK=1 WORLD_SIZE=2 --
env_error "no MASTER_PORT" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 --
env_error "MASTER_PORT='70000'" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000 --
env_error "need LOCAL_RANK < LOCAL_WORLD_SIZE" RANK=1 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 --
env_error "SLURM_PROCID is set but SLURM_NTASKS is not" SLURM_PROCID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 --
env_error "SLURM_PROCID=4 with SLURM_NTASKS=4" SLURM_PROCID=4 SLURM_NTASKS=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 --
env_error "--zero is 1 (the optimizer state sharded) or 3" -- --zero 2
# ranks with an --out each (hosts without a shared file system): rank 0
# prepares the shards into its own --out, and rank 1's refusal names that
# cause, not a missing corpus package
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CODA_COMM_TIMEOUT=6 \
    "$coda" train $small --corpus corpus --out own$r --batch 2 --steps 2 >own.$r.out 2>own.$r.err &
  eval "o$r=\$!"
done
wait "$o0"; a=$?
wait "$o1"; b=$?
if [ $b -ne 0 ] && grep -q -F "rank 0 prepares the token shards into its own --out" own.1.err &&
   ! grep -q "fortunes" own.1.err; then ok "own --out per rank: $(tail -1 own.1.err)"
else fail "own --out per rank: statuses $a $b"; sed 's/^/  | /' own.1.err; fi
# a corpus would be tokenized by every rank at once: prepared once instead
env_error "is a corpus, and a job of 2 ranks would tokenize it" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 -- --data corpus/text
# an address that does not resolve (a clear failure; without DNS it is
# retried until the timeout)
RANK=1 WORLD_SIZE=2 MASTER_ADDR=no.such.host.invalid MASTER_PORT=1234 CODA_COMM_TIMEOUT=3 "$coda" train $small --data $data --out bad >/dev/null 2>err.txt
rc=$?
if [ $rc -ne 0 ] && grep -q -F "MASTER_ADDR 'no.such.host.invalid'" err.txt; then ok "unknown MASTER_ADDR: $(cat err.txt)"
else fail "unknown MASTER_ADDR: status $rc"; cat err.txt; fi
# a one-process job (torchrun --nproc-per-node 1) runs alone
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "$coda" train $small --data $data --out alone --batch 4 --steps 6 --quiet >/dev/null 2>err.txt
if [ $? -eq 0 ] && cmp -s alone/loss.csv one2/loss.csv; then ok "WORLD_SIZE=1 runs as one process"
else fail "WORLD_SIZE=1"; cat err.txt; fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
