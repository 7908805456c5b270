/* The mainloop headers, embedded into the library so that NVRTC can compile
 * generated epilogues on machines without the source tree. The assembler
 * resolves the paths through the compiler's include directories (src/).
 * Note for incremental builds: the dependency on the three headers is not
 * seen by the build system's dependency scan (CMake's OBJECT_DEPENDS on
 * this file lists them); a clean build always embeds the current text. */
__asm__(".section .rodata\n"
        ".global coda_epi_hdr_gemm_sm90\n"
        "coda_epi_hdr_gemm_sm90:\n"
        ".incbin \"backends/cuda/gemm_sm90.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_ptx_sm90\n"
        "coda_epi_hdr_ptx_sm90:\n"
        ".incbin \"backends/cuda/ptx_sm90.cuh\"\n"
        ".byte 0\n"
        ".global coda_epi_hdr_wgmma\n"
        "coda_epi_hdr_wgmma:\n"
        ".incbin \"backends/cuda/wgmma.cuh\"\n"
        ".byte 0\n"
        ".previous\n");
