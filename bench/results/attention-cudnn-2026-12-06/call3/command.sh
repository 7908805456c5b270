# The device call behind call3/ (run in the repository root on the GPU
# machine, binaries from build-attn carried in .carry-attn/ as .xz):
L=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')")
export LD_LIBRARY_PATH=$(dirname $L):$LD_LIBRARY_PATH CODA_CUDNN_LIB=$L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd .carry-attn && xz -dkf bench_cudnn.xz test_attention_gpu.xz && chmod +x bench_cudnn test_attention_gpu && cd ..
timeout 100 .carry-attn/bench_cudnn $OUT/bench_cudnn.json > $OUT/bench_cudnn.md 2> $OUT/bench_cudnn.err
timeout 50 python3 bench/attention/sdpa_cudnn.py $OUT/bench_cudnn.md $OUT/sdpa_cudnn.json > $OUT/sdpa_cudnn.md 2>&1
timeout 110 .carry-attn/test_attention_gpu > $OUT/test_full.log 2>&1
# build (build machine): cmake --build build-attn --target coda_static test_attention_gpu;
# gcc -std=c11 -O2 -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I/usr/local/cuda/include
#   bench/attention/bench_cudnn.c -o bench_cudnn build-attn/libcoda.a -L/usr/local/cuda/lib64
#   -lcudart_static -lrt -lpthread -ldl -fopenmp -lm -lz -lutf8proc -lstdc++
