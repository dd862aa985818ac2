/*
 * kdt_tree_accept_plan.h: tree_accept's block size, which the launcher
 * (src/kernels/tree_accept.c) launches with and the kernel
 * (tree_accept.cu) is built for.  C and C++.
 */
#ifndef KDT_TREE_ACCEPT_PLAN_H
#define KDT_TREE_ACCEPT_PLAN_H

/* Requests per block, a thread each. */
#define KDT_TA_THREADS 128

#endif /* KDT_TREE_ACCEPT_PLAN_H */
