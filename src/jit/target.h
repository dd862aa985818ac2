/*
 * jit/target.h: whether a kernel can be compiled for a target at all,
 * asked before any cache or compiler is.  (Target names themselves are
 * cuda/nvrtc.h's kdt_target_parse().)
 */
#ifndef KDT_JIT_TARGET_H
#define KDT_JIT_TARGET_H

/* KDTREE_OK when kernel `id` can be compiled for `target`, else
 * KDTREE_ERROR_ARCH with the last error naming the kernel, the target and
 * the kernel's minimum (its registry definition's min_arch), or saying
 * that `target` is no target name.  `fn` (may be NULL) prefixes the
 * message. */
int kdt_target_check(const char *fn, int id, const char *target);

#endif /* KDT_JIT_TARGET_H */
