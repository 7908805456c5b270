#!/bin/bash
# Call 4: test_train_device again, built with a line per case (family,
# loss and gradient norm on the GPU and the CPU) to name the failing case
# of call 3. Carries .carry/p6 (the tree of call 3 plus that print).
export OUT; PACK=.carry/p6 source bench/gpu_env.sh >/dev/null
timeout 120 "$P/tests/test_train_device" 2>&1 | grep -E "loss gpu|FAIL|failed|checks" | head -20
