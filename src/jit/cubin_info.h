/*
 * jit/cubin_info.h: what a cubin says about each of its kernels — the
 * registers a thread holds, its static shared memory, its stack (spills,
 * local arrays, calls) and the launch bounds it was compiled for.  These
 * are what a user tunes a shape with, and what says a body fits (no
 * spills, shared memory under the part's limit).
 *
 * Read from the ELF image itself (section headers, the symbol table and
 * the .nv.info attributes NVIDIA's tools write), so it needs neither the
 * driver nor the CUDA tools: kdtree-cache and kdtree-bench report it on a
 * machine without a GPU.  The numbers are the ones `cuobjdump -res-usage`
 * prints (REG, STACK, SHARED, CONSTANT[0]); tests/test_cubin_tools.c
 * checks that on real cubins.
 */
#ifndef KDT_CUBIN_INFO_H
#define KDT_CUBIN_INFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct kdt_cubin_kernel {
    /* The entry point's name; longer names are cut to fit. */
    char name[128];
    uint32_t registers;
    /* Per thread: the stack frame with what the kernel's callees need.
     * Anything above 0 is local memory: spills, local arrays or calls. */
    uint32_t stack_bytes;
    /* Static shared memory per block, with the 1 KB the system reserves
     * (sm_90, sm_120) once a kernel uses any; dynamic shared memory is
     * chosen at launch and is not in the image. */
    uint32_t shared_bytes;
    /* The parameter bank (constant bank 0): the kernel's parameters and
     * the driver's own words. */
    uint32_t param_bytes;
    /* __launch_bounds__ (x * y * z of .maxntid, or of .reqntid), 0 when
     * the kernel declares none. */
    uint32_t max_threads;
} kdt_cubin_kernel;

/* Reads the kernels of the cubin `image` (size bytes, any alignment).
 * Fills out[0..max) in the order the image lists them and sets *n_kernels
 * to how many there are (which may exceed max).  Returns 0, or -1 with a
 * short reason in `why` ("not an ELF image", "section 7 runs past the end
 * of the image", ...) when the image is not a well-formed cubin; nothing
 * is read outside [image, image + size). */
int kdt_cubin_kernels(const void *image, size_t size, kdt_cubin_kernel *out,
                      int max, int *n_kernels, char *why, size_t why_size);

#endif /* KDT_CUBIN_INFO_H */
