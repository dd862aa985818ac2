/*
 * cuda/nvrtc_signals.c: the process's signal handling, left as the
 * program set it (see cuda/nvrtc_signals.h for what NVRTC does).
 *
 * The shield rewrites NVRTC's import slots of signal() (its GOT entries)
 * once, before its first compile: NVRTC's code then calls nvrtc_signal()
 * below, the rest of the process (and the program's own calls) still
 * libc's.  Only ELF RELA objects are handled (x86-64, aarch64: the CUDA
 * platforms); elsewhere nothing is rewritten and the hold alone applies.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda/nvrtc_signals.h"

typedef void (*handler_fn)(int);

/* ---- 1: NVRTC's calls to signal() ---------------------------------------- */

/* Where NVRTC is loaded (dladdr's dli_fbase), to tell its handler from the
 * program's; set once by the shield, before any compile. */
static void *nvrtc_base;

/* 1 when `h` is a function of NVRTC's: its own handler. */
static int
in_nvrtc(handler_fn h)
{
    Dl_info di;

    return nvrtc_base && h != SIG_DFL && h != SIG_IGN && h != SIG_ERR
           && dladdr((void *)h, &di) && di.dli_fbase == nvrtc_base;
}

/* signal() as NVRTC sees it.  For SIGINT and SIGTERM it answers with the
 * disposition in force and changes nothing: NVRTC's "ignore, then install
 * mine unless it was ignored, then put the old one back" then leaves the
 * program's handling whole.  A handler of NVRTC's found installed (by a
 * compile of the program's own that began before the shield) may still be
 * replaced, so that such a compile's restore goes through. */
static handler_fn
nvrtc_signal(int sig, handler_fn handler)
{
    struct sigaction cur;

    if (sig != SIGINT && sig != SIGTERM)
        return signal(sig, handler);
    if (sigaction(sig, NULL, &cur) != 0)
        return SIG_ERR;
    if (in_nvrtc(cur.sa_handler) && !in_nvrtc(handler))
        return signal(sig, handler);
    return cur.sa_handler;
}

#if defined(__x86_64__) || defined(__aarch64__)

#if defined(__x86_64__)
#define SLOT_TYPE(t) ((t) == R_X86_64_JUMP_SLOT || (t) == R_X86_64_GLOB_DAT)
#else
#define SLOT_TYPE(t) ((t) == R_AARCH64_JUMP_SLOT || (t) == R_AARCH64_GLOB_DAT)
#endif

/* The pages the loader made read-only after relocating (PT_GNU_RELRO,
 * rounded down at both ends as the loader rounds them). */
typedef struct relro {
    ElfW(Addr) base;
    const char *name;
    uintptr_t lo, hi;
} relro;

static int
find_relro(struct dl_phdr_info *info, size_t size, void *data)
{
    relro *r = data;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

    if (info->dlpi_addr != r->base || !info->dlpi_name
        || strcmp(info->dlpi_name, r->name) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_GNU_RELRO)
            continue;
        r->lo = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
        r->hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
    }
    return 1;
}

/* Stores `value` into the import slot `slot`, through a read-only page if
 * it is one (and leaves it read-only).  0 or -1. */
static int
write_slot(void **slot, void *value, const relro *r)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *at = (void *)((uintptr_t)slot & ~(page - 1));
    int ro = (uintptr_t)slot >= r->lo && (uintptr_t)slot < r->hi;

    if (ro && mprotect(at, page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    /* One aligned pointer store: a thread calling through the slot meanwhile
     * gets libc's signal() or ours, never half of either. */
    __atomic_store_n(slot, value, __ATOMIC_SEQ_CST);
    if (ro)
        (void)mprotect(at, page, PROT_READ);
    return 0;
}

/* An address of the dynamic section: glibc relocates them in place when it
 * loads the object, other loaders do not. */
static uintptr_t
dyn_addr(const struct link_map *lm, ElfW(Addr) v)
{
    return v < lm->l_addr ? lm->l_addr + v : v;
}

/* Rewrites `lm`'s import slots of `name` to `value`; returns how many. */
static int
patch_imports(const struct link_map *lm, const char *name, void *value)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *table[2] = {NULL, NULL};
    size_t bytes[2] = {0, 0};
    relro r = {lm->l_addr, lm->l_name, 0, 0};
    int plt_rela = 0, n = 0;

    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB:
            symtab = (const void *)dyn_addr(lm, d->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strtab = (const void *)dyn_addr(lm, d->d_un.d_ptr);
            break;
        case DT_JMPREL:
            table[0] = (const void *)dyn_addr(lm, d->d_un.d_ptr);
            break;
        case DT_PLTRELSZ: bytes[0] = d->d_un.d_val; break;
        case DT_PLTREL: plt_rela = d->d_un.d_val == DT_RELA; break;
        case DT_RELA:
            table[1] = (const void *)dyn_addr(lm, d->d_un.d_ptr);
            break;
        case DT_RELASZ: bytes[1] = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab)
        return 0;
    if (!plt_rela)
        table[0] = NULL;
    dl_iterate_phdr(find_relro, &r);
    for (int t = 0; t < 2; t++) {
        size_t count = table[t] ? bytes[t] / sizeof *table[t] : 0;
        for (size_t i = 0; i < count; i++) {
            const ElfW(Rela) *rel = &table[t][i];
            size_t s = ELF64_R_SYM(rel->r_info);
            if (s == 0 || !SLOT_TYPE(ELF64_R_TYPE(rel->r_info))
                || symtab[s].st_shndx != SHN_UNDEF
                || strcmp(strtab + symtab[s].st_name, name) != 0)
                continue;
            if (write_slot((void **)(lm->l_addr + rel->r_offset), value,
                           &r) == 0)
                n++;
        }
    }
    return n;
}

int
kdt_nvrtc_signals_shield(void *handle)
{
    struct link_map *lm = NULL;
    void *sym = dlsym(handle, "nvrtcVersion");
    Dl_info di;

    if (!sym || !dladdr(sym, &di)
        || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return 0;
    nvrtc_base = di.dli_fbase;
    return patch_imports(lm, "signal", (void *)nvrtc_signal);
}

#else

int
kdt_nvrtc_signals_shield(void *handle)
{
    (void)handle;
    return 0;
}

#endif

/* ---- 2: every disposition, put back ------------------------------------- */

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;
static int holds;
/* The dispositions when the first hold began (have: sigaction could read
 * it; glibc keeps two real-time signals to itself). */
static struct sigaction saved[NSIG];
static unsigned char have[NSIG];

/* 1 when two dispositions differ in handler, flags or mask (the mask read
 * signal by signal: beyond the kernel's 64 signals a sigset_t is not
 * filled in). */
static int
differ(const struct sigaction *a, const struct sigaction *b)
{
    if (a->sa_handler != b->sa_handler || a->sa_flags != b->sa_flags)
        return 1;
    for (int s = 1; s < NSIG; s++)
        if (sigismember(&a->sa_mask, s) != sigismember(&b->sa_mask, s))
            return 1;
    return 0;
}

/* Under hold_lock, holds 0 -> 1: reads every disposition. */
static void
save_all(void)
{
    for (int s = 1; s < NSIG; s++)
        have[s] = s != SIGKILL && s != SIGSTOP
                  && sigaction(s, NULL, &saved[s]) == 0;
}

/* Under hold_lock, holds 1 -> 0: puts back what differs, unless the
 * program installed a handler of its own meanwhile (from another thread,
 * during a compile): that one is the program's to keep. */
static void
restore_all(void)
{
    struct sigaction cur;

    for (int s = 1; s < NSIG; s++) {
        if (!have[s] || sigaction(s, NULL, &cur) != 0
            || !differ(&cur, &saved[s]))
            continue;
        if (cur.sa_handler != saved[s].sa_handler && cur.sa_handler != SIG_DFL
            && cur.sa_handler != SIG_IGN && !in_nvrtc(cur.sa_handler))
            continue;
        (void)sigaction(s, &saved[s], NULL);
    }
}

static void
hold_prefork(void)
{
    pthread_mutex_lock(&hold_lock);
}

static void
hold_postfork_parent(void)
{
    pthread_mutex_unlock(&hold_lock);
}

/* The child has only the forking thread: a compile of another thread is
 * not the child's, and what it changed is put back here. */
static void
hold_postfork_child(void)
{
    if (holds > 0)
        restore_all();
    holds = 0;
    pthread_mutex_unlock(&hold_lock);
}

static void
hold_init(void)
{
    pthread_atfork(hold_prefork, hold_postfork_parent, hold_postfork_child);
}

void
kdt_nvrtc_signals_hold(void)
{
    pthread_once(&hold_once, hold_init);
    pthread_mutex_lock(&hold_lock);
    if (holds++ == 0)
        save_all();
    pthread_mutex_unlock(&hold_lock);
}

void
kdt_nvrtc_signals_release(void)
{
    pthread_mutex_lock(&hold_lock);
    if (holds > 0 && --holds == 0)
        restore_all();
    pthread_mutex_unlock(&hold_lock);
}
