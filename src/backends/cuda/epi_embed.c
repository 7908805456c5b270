/* The mainloop headers and the epilogue's device helpers, embedded into the library so that NVRTC can compile
 * generated epilogues on machines without the source tree. The assembler
 * resolves the paths through the compiler's include directories (src/).
 * The dependency on the five headers is not seen by the compiler's
 * dependency scan: CMakeLists.txt names them as OBJECT_DEPENDS of this
 * file. */
__asm__(".section .rodata\n"
        ".global coda_epi_hdr_gemm_sm90\n"
        "coda_epi_hdr_gemm_sm90:\n"
        ".incbin \"backends/cuda/gemm_sm90.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_gemm_sm80\n"
        "coda_epi_hdr_gemm_sm80:\n"
        ".incbin \"backends/cuda/gemm_sm80.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_ptx_sm90\n"
        "coda_epi_hdr_ptx_sm90:\n"
        ".incbin \"backends/cuda/ptx_sm90.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_wgmma\n"
        "coda_epi_hdr_wgmma:\n"
        ".incbin \"backends/cuda/wgmma.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_helpers\n"
        "coda_epi_hdr_helpers:\n"
        ".incbin \"backends/cuda/epi_helpers.cuh\"\n"
        ".byte 0\n"
        ".previous\n");
