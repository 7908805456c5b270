#!/bin/bash
# RoPE scaling and a non-default RMSNorm eps on the GPU (run from the
# repository root on a machine with an sm_90 GPU, with the binaries of a
# CUDA build):
#
#   tests/gpu/hf_rope_eps_gpu.sh BUILD_DIR [WORKDIR]
#
# A small model (d 128, 2/1 heads of 64, seq 64) is trained 3 steps on the
# CPU, exported to the Hugging Face layout, and its config.json rewritten
# four ways: as exported (eps 1e-5, no scaling), rms_norm_eps 1e-6 and 0.05,
# rope_scaling llama3 (factor 32, low 1, high 4, original 16) and linear
# (factor 4, transformers-5 rope_parameters spelling). Each is imported and
# scored by `coda eval` on the CPU plan engine and on the GPU: the two
# losses must agree within 1 % relative for every variant (the GPU runs the
# same frequency table and the eps-substituted programs through NVRTC), and
# the scaled and eps-changed variants must differ from the exported one on
# the GPU (the change reaches the device). Exit 0 on success.
set -u
build=$1
work=${2:-.carry/hf-rope-eps-gpu}
coda=$build/coda
rm -rf "$work"
mkdir -p "$work"
fail=0
for f in docs/*.md; do cat "$f"; echo; done >"$work/corpus.txt"
model="--dim 128 --layers 2 --heads 2 --kv-heads 1 --ffn 256 --seq 64 --batch 4 --val-batches 1"
# shellcheck disable=SC2086
"$coda" train $model --data "$work/corpus.txt" --out "$work/base" --steps 3 --quiet || exit 1
"$coda" train --export-hf "$work/hf" --resume "$work/base/checkpoint.safetensors" || exit 1
cfg="$work/hf/config.json"
cp "$cfg" "$work/config.orig"
variant() { # name, sed expression on config.json
  mkdir -p "$work/v_$1"
  cp "$work/hf/model.safetensors" "$work/v_$1/"
  sed -e "$2" "$work/config.orig" >"$work/v_$1/config.json"
  "$coda" train --import-hf "$work/v_$1" --out "$work/ck_$1" >/dev/null || { echo "FAIL: import $1"; fail=1; }
}
variant plain 's/x/x/'
variant eps6 's/"rms_norm_eps": [^,]*/"rms_norm_eps": 1e-06/'
variant eps05 's/"rms_norm_eps": [^,]*/"rms_norm_eps": 0.05/'
variant llama3 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}/'
variant linear5 's/"rope_scaling": null/"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}/'
score() { # checkpoint dir, device -> loss
  "$coda" eval --checkpoint "$work/ck_$1/checkpoint.safetensors" --data "$work/base/data" \
    --max-windows 16 --batch 4 --device "$2" | awk '/loss/ {print $3}'
}
plain_gpu=$(score plain gpu)
for v in plain eps6 eps05 llama3 linear5; do
  c=$(score $v cpu)
  g=$(score $v gpu)
  ok=$(awk -v c="$c" -v g="$g" 'BEGIN { d = c - g; if (d < 0) d = -d; print (c != "" && g != "" && d <= 0.01 * c) ? 1 : 0 }')
  echo "$v: cpu $c gpu $g"
  [ "$ok" = 1 ] || { echo "FAIL: $v: CPU and GPU losses differ by more than 1 %"; fail=1; }
  if [ $v != plain ] && [ $v != eps6 ] && [ "$g" = "$plain_gpu" ]; then
    echo "FAIL: $v: the GPU loss equals the unscaled model's"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "ok"
exit $fail
