#!/bin/bash
# 2026-12-07 (b): the decode table of issue 36 in one call
# (bench/generate/decode_table.sh: test_decode_gpu with the new Qwen3
# cases, coda generate --bench at 1.1b and 8b, batch 1/16/64, prompts of
# 512 and 8192 tokens, the batch-1 step profile, an imported HF checkpoint
# streamed, HF generate with the static cache in the same call). Carries
# .carry/p4 (tests/gpu/pack_shared.sh of the tree).
PACK=.carry/p4 LIMIT=${LIMIT:-550} bash bench/generate/decode_table.sh "1.1b 8b"
