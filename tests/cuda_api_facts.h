/*
 * cuda_api_facts.h: the facts tests/cuda_api_list.h names, as numbers, so
 * that two translation units (one over our declarations, one over the
 * toolkit's) can be compared without including both headers in one.
 */
#ifndef CUDA_API_FACTS_H
#define CUDA_API_FACTS_H

#include <stddef.h>

typedef struct {
    const char *what; /* "VALUE(CUDA_SUCCESS)", "OFFSET(CUlaunchConfig, attrs)" */
    long long value;
} cuda_api_fact;

#define VALUE(e) {"VALUE(" #e ")", (long long)(e)},
#define SIZE(t) {"SIZE(" #t ")", (long long)sizeof(t)},
#define ALIGN(t) {"ALIGN(" #t ")", (long long)_Alignof(t)},
#define OFFSET(t, m) {"OFFSET(" #t ", " #m ")", (long long)offsetof(t, m)},

/* Ours (test_cuda_api.c) and the toolkit's (cuda_api_toolkit.c); the
 * toolkit's count is -1 where its headers were not found at configure
 * time. */
extern const cuda_api_fact cuda_api_toolkit_facts[];
extern const int cuda_api_toolkit_count;

#endif /* CUDA_API_FACTS_H */
