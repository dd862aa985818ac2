/*
 * gpu.h: what the GPU test suites share: finding a device (or exiting 77,
 * Automake's "skipped"), device buffers, and poisoning outputs so that an
 * element the kernel forgot to write is caught.
 *
 * A GPU suite's main() is kdt_test_main(suite, KDT_TEST_GPU) (harness.h):
 * it skips (77) without a device and runs the Check cases in the test
 * process itself, since CUDA is not fork-safe.
 */
#ifndef KDT_TESTS_GPU_H
#define KDT_TESTS_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kdtree.h"

/* The runtime of device 0, created once; call it first in the suite
 * function (the driver calls below need it).  Exits 77 (skip) when there
 * is no driver or no device, which KDT_TEST_GPU has ruled out already. */
kdtree_runtime *gpu_runtime(void);
/* Exits the process with a message when a driver call fails. */
void gpu_check_cu(int cu_result, const char *what);

/* cuMemAlloc of `size` bytes (at least 1), filled with 0xA5 bytes (a
 * poison no kernel writes by accident: as f32 it is -2.9e-16, as i32
 * -1515870811). */
uint64_t gpu_alloc(size_t size);
uint64_t gpu_upload(const void *host, size_t size);
void gpu_download(void *host, uint64_t dev, size_t size);
void gpu_free(uint64_t dev);
void gpu_sync(void);
/* A fresh non-default stream, for the tests that pass one. */
void *gpu_stream(void);

/* CUDA-graph capture of what is enqueued on `stream` (a gpu_stream(), in
 * the global capture mode, where a call that is unsafe during capture
 * fails): gpu_capture_begin starts it; gpu_capture_replay ends it,
 * instantiates the graph, launches it once on the stream and frees it.
 * The graph calls are the tests' own (dlsym'ed from libcuda): the
 * library has no use for them. */
void gpu_capture_begin(void *stream);
void gpu_capture_replay(void *stream);

#endif /* KDT_TESTS_GPU_H */
