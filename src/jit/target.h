/*
 * jit/target.h: whether a kernel can be compiled for a target at all,
 * asked before any cache or compiler is.  (Target names themselves are
 * cuda/nvrtc.h's kdt_target_parse().)
 */
#ifndef KDT_JIT_TARGET_H
#define KDT_JIT_TARGET_H

/* KDTREE_OK when kernel `id` with the constants `vals` can be compiled
 * for `target`, else KDTREE_ERROR_ARCH with the last error naming the
 * kernel, the target and the minimum (its registry definition's min_arch,
 * or what min_arch_of says for vals), or saying that `target` is no
 * target name.  vals may
 * be NULL: then only the kernel's own minimum is checked.  `fn` (may be
 * NULL) prefixes the message. */
int kdt_target_check(const char *fn, int id, const int64_t *vals,
                     const char *target);

#endif /* KDT_JIT_TARGET_H */
