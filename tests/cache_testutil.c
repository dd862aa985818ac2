/*
 * cache_testutil.c: see cache_testutil.h.
 */
#define _GNU_SOURCE /* nftw */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_testutil.h"
#include "base/error.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/layout.h"
#include "kdtree.h"

char ct_base[256];
char ct_user[300];
char ct_spill[340];

void
ct_setup(void)
{
    char run[300];

    snprintf(ct_base, sizeof ct_base, "/tmp/kdt-cache-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(ct_base));
    snprintf(ct_user, sizeof ct_user, "%s/user", ct_base);
    snprintf(run, sizeof run, "%s/run", ct_base);
    snprintf(ct_spill, sizeof ct_spill, "%s/kdtree-jit-spill", run);
    ck_assert_int_eq(mkdir(run, 0700), 0);
    setenv("KDTREE_CACHE_DIR", ct_user, 1);
    setenv("XDG_RUNTIME_DIR", run, 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "", 1);
    unsetenv("KDTREE_CACHE");
    unsetenv("KDTREE_CACHE_PATH");
    unsetenv("KDTREE_CACHE_MAX_BYTES");
    unsetenv("KDTREE_CACHE_SPILL_MAX_BYTES");
    unsetenv("KDTREE_CACHE_LOCK_TIMEOUT");
    unsetenv("KDTREE_CACHE_TEST_PUBLISH_DELAY_US");
    unsetenv("KDTREE_CACHE_TEST_PUBLISH_GATE");
    /* Quiet unless a test asks: many tests provoke warnings on purpose. */
    setenv("KDTREE_LOG", "error", 1);
    kdt_log_reload();
    kdt_cache_memory_clear();
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        chmod(path, 0700);
    return remove(path) == 0 || errno == ENOENT ? 0 : 0;
}

void
ct_rm_rf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void
ct_teardown(void)
{
    /* A publish still queued would recreate the tree being removed. */
    kdt_cache_flush();
    if (ct_base[0])
        ct_rm_rf(ct_base);
    ct_base[0] = '\0';
}

static void
ct_preimage_head(kdt_preimage *p, const char *kernel, const char *target)
{
    kdt_preimage_init(p);
    kdt_preimage_add_str(p, "format", "1");
    kdt_preimage_add_str(p, "library", "test");
    kdt_preimage_add_str(p, "kernel", kernel);
    kdt_preimage_add_str(p, "fake.cu", "extern \"C\" __global__ void k() {}");
    kdt_preimage_add_str(p, "constants", "N_MAX=65,L=15");
    kdt_preimage_add_str(p, "target", target);
}

#define CT_NVRTC "13.0 test"

void
ct_preimage(kdt_preimage *p, const char *kernel, const char *target,
            kdt_key *key)
{
    ct_preimage_head(p, kernel, target);
    kdt_preimage_add_str(p, "nvrtc", CT_NVRTC);
    ck_assert_int_eq(p->failed, 0);
    if (key)
        *key = kdt_key_of(p->text, p->len);
}

void
ct_alias_preimage(kdt_preimage *p, const char *kernel, const char *target,
                  kdt_key *key)
{
    ct_preimage_head(p, kernel, target);
    kdt_preimage_add_str(p, "alias", "nvrtc");
    ck_assert_int_eq(p->failed, 0);
    if (key)
        *key = kdt_key_of(p->text, p->len);
}

kdt_blob
ct_alias_blob(void)
{
    kdt_blob b;

    b.data = strdup(CT_NVRTC);
    ck_assert_ptr_nonnull(b.data);
    b.size = strlen(CT_NVRTC);
    b.kind = KDT_PAYLOAD_ALIAS;
    return b;
}

void
ct_stamp(const char *path, int t)
{
    struct timespec ts[2] = { { 1000000000 + t, 0 }, { 1000000000 + t, 0 } };

    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

kdt_blob
ct_blob(size_t size, unsigned seed)
{
    kdt_blob b;
    unsigned char *d = malloc(size ? size : 1);
    size_t i;
    unsigned x = seed * 2654435761u + 1;

    ck_assert_ptr_nonnull(d);
    for (i = 0; i < size; i++) {
        x = x * 1103515245u + 12345u;
        d[i] = (unsigned char)(x >> 16);
    }
    b.data = d;
    b.size = size;
    b.kind = KDT_PAYLOAD_CUBIN;
    return b;
}

char *
ct_entry_path(const char *base, const kdt_key *key)
{
    char hex[33];
    char *p = malloc(strlen(base) + 64);

    ck_assert_ptr_nonnull(p);
    kdt_key_hex(key, hex);
    sprintf(p, "%s/v%d/%s.kdt", base, KDT_CACHE_FORMAT, hex);
    return p;
}

int
ct_read(const char *path, void **buf, size_t *size)
{
    FILE *f = fopen(path, "rb");
    long n;

    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(n ? (size_t)n : 1);
    *size = (size_t)n;
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(*buf);
        return -1;
    }
    fclose(f);
    return 0;
}

int
ct_write(const char *path, const void *buf, size_t size, int mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

    if (fd < 0)
        return -1;
    if (size && write(fd, buf, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    fchmod(fd, (mode_t)mode);
    return close(fd);
}

void
ct_mkdirs(const char *path)
{
    char *p = strdup(path), *s;

    for (s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0700);
            *s = '/';
        }
    }
    mkdir(p, 0700);
    free(p);
}

void
ct_write_entry(const char *path, const kdt_key *key, const char *pre,
               size_t pre_len, const kdt_blob *blob)
{
    char *dir = strdup(path);
    void *enc;
    size_t n;

    *strrchr(dir, '/') = '\0';
    ct_mkdirs(dir);
    free(dir);
    ck_assert_int_eq(kdt_entry_encode(key, pre, pre_len, blob, &enc, &n), 0);
    ck_assert_int_eq(ct_write(path, enc, n, 0600), 0);
    free(enc);
}

int
ct_count_log_lines(void (*fn)(void), const char *needle)
{
    char path[400], line[4096];
    int saved, fd, n = 0;
    FILE *f;

    snprintf(path, sizeof path, "%s/stderr.txt", ct_base);
    fflush(stderr);
    saved = dup(2);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

static int capture_saved = -1;
static char capture_path[400];

void
ct_capture_begin(void)
{
    int fd;

    snprintf(capture_path, sizeof capture_path, "%s/capture-%d.txt", ct_base,
             (int)getpid());
    fflush(stderr);
    capture_saved = dup(2);
    ck_assert_int_ge(capture_saved, 0);
    fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    close(fd);
}

char *
ct_capture_end(void)
{
    void *buf;
    size_t n;
    char *s;

    fflush(stderr);
    dup2(capture_saved, 2);
    close(capture_saved);
    capture_saved = -1;
    ck_assert_int_eq(ct_read(capture_path, &buf, &n), 0);
    s = realloc(buf, n + 1);
    ck_assert_ptr_nonnull(s);
    s[n] = '\0';
    return s;
}

int
ct_count_lines(const char *text, const char *needle)
{
    int n = 0;

    while (text && *text) {
        const char *end = strchr(text, '\n');
        size_t len = end ? (size_t)(end - text) : strlen(text);
        const char *hit = strstr(text, needle);
        if (hit && (size_t)(hit - text) < len)
            n++;
        text += len + (end ? 1 : 0);
    }
    return n;
}

void
ct_unwritable_dir(void)
{
    char file[300], dir[400];

    snprintf(file, sizeof file, "%s/plain-file", ct_base);
    ck_assert_int_eq(ct_write(file, "x", 1, 0600), 0);
    snprintf(dir, sizeof dir, "%s/cache", file);
    setenv("KDTREE_CACHE_DIR", dir, 1);
}

int
ct_disk_lookup(const kdt_key *key, const kdt_preimage *p, kdt_blob *out,
               int *from)
{
    kdt_blob got;
    int r, f;

    kdt_cache_memory_clear();
    r = kdt_cache_lookup(key, p->text, p->len, out ? out : &got,
                         from ? from : &f);
    ck_assert_int_ge(r, 0);
    if (r == 1 && !out)
        kdt_blob_free(&got);
    return r;
}

int
ct_same_blob(const kdt_blob *a, const kdt_blob *b)
{
    return a->size == b->size && a->kind == b->kind
           && memcmp(a->data, b->data, a->size) == 0;
}

kdtree_cache_stats
ct_stats(void)
{
    kdtree_cache_stats s;

    ck_assert_int_eq(kdtree_cache_stats_get(&s), 0);
    return s;
}

int
ct_entry_state(const kdt_key *key, const kdt_blob *want)
{
    return ct_entry_state_in(ct_user, key, want);
}

int
ct_entry_state_in(const char *base, const kdt_key *key, const kdt_blob *want)
{
    char why[KDT_WHY_SIZE], name[KDT_NAME_SIZE];
    kdt_entry_view v;
    void *buf;
    size_t size;
    int fd, r;

    r = kdt_cache_dir_open(base, 0, &fd, why, sizeof why);
    if (r != 0)
        return r == 1 ? 0 : -1;
    kdt_layout_entry_name(key, name);
    r = kdt_cache_read_entry(fd, name, 0, &buf, &size, why, sizeof why);
    close(fd);
    if (r == 1)
        return 0;
    if (r != 0)
        return -1;
    r = kdt_entry_decode(buf, size, key, &v, why, sizeof why) == 0 ? 1 : -1;
    if (r == 1 && want
        && (v.payload_size != want->size
            || memcmp(v.payload, want->data, want->size) != 0))
        r = -1;
    free(buf);
    return r;
}

int
ct_open_user_dir(void)
{
    char why[KDT_WHY_SIZE];
    int fd;

    /* created if need be: a test may look before any writer made it (a
     * publisher killed before its first mkdir) */
    ck_assert_msg(kdt_cache_dir_open(ct_user, KDT_DIR_CREATE, &fd, why,
                                     sizeof why) == 0,
                  "%s", why);
    return fd;
}

size_t
ct_count_entries(void)
{
    char why[KDT_WHY_SIZE];
    kdt_cache_file *f;
    size_t n;
    int fd;

    if (kdt_cache_dir_open(ct_user, 0, &fd, why, sizeof why) != 0)
        return 0;
    ck_assert_int_eq(kdt_cache_scan(fd, &f, &n), 0);
    free(f);
    close(fd);
    return n;
}

kdt_cache_lock *
ct_node_lock(const kdt_key *key)
{
    kdt_cache_lock *l = kdt_cache_lock_acquire(key, "a test's compile");

    if (kdt_cache_lock_held(l))
        return l;
    kdt_cache_lock_release(l);
    return NULL;
}

int
ct_locked_for(const kdt_cache_lock *l, const char *base)
{
    const char *locked = kdt_cache_lock_dir_id(l);
    char *id = kdt_cache_dir_id(base);
    int r = locked && id && strcmp(locked, id) == 0;

    free(id);
    return r;
}

pid_t
ct_holder(const kdt_key *key, int go)
{
    int ready[2];
    pid_t pid;
    char c;

    ck_assert_int_eq(pipe(ready), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kdt_cache_lock *l = ct_node_lock(key);
        (void)!write(ready[1], l ? "y" : "n", 1);
        if (go >= 0)
            (void)!read(go, &c, 1);
        else
            for (;;)
                pause();
        kdt_cache_lock_release(l);
        _exit(0);
    }
    close(ready[1]);
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    ck_assert_msg(c == 'y', "the holder did not get the lock");
    return pid;
}

void
ct_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
}

void
ct_store_pair(const char *kernel, kdt_cache_lock *lock, kdt_key *key,
              kdt_key *alias)
{
    kdt_preimage p, ap;
    kdt_blob b = ct_blob(5000, 3), ab = ct_alias_blob();

    ct_preimage(&p, kernel, "sm_90", key);
    ct_alias_preimage(&ap, kernel, "sm_90", alias);
    kdt_cache_item items[2] = {{key, p.text, p.len, &b},
                               {alias, ap.text, ap.len, &ab}};
    ck_assert_int_eq(kdt_cache_store_async(items, 2, lock), 0);
    kdt_cache_flush();
    kdt_blob_free(&b);
    kdt_blob_free(&ab);
    kdt_preimage_free(&p);
    kdt_preimage_free(&ap);
}

char *
ct_compile_in_processes(int n)
{
    char logs[8][400], *all = NULL;
    size_t len = 0;
    pid_t pid[8];

    ck_assert_int_le(n, 8);
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/compile-%d.log", ct_base, i);
        pid[i] = fork();
        if (pid[i] == 0) {
            int32_t cached;
            int fd = open(logs[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
            dup2(fd, 2);
            _exit(kdtree_compile(&cached, "sm_90", "tree_accept",
                                 kdtree_kernel_default_shape("tree_accept"))
                  == KDTREE_OK ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++) {
        int status;
        void *buf;
        size_t size;
        ck_assert_int_eq(waitpid(pid[i], &status, 0), pid[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "compile %d failed", i);
        ck_assert_int_eq(ct_read(logs[i], &buf, &size), 0);
        all = realloc(all, len + size + 1);
        ck_assert_ptr_nonnull(all);
        memcpy(all + len, buf, size);
        len += size;
        all[len] = '\0';
        free(buf);
    }
    return all;
}

char *
ct_compile_once_in_processes(int n)
{
    char *log;
    int compiles;

    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "600", 1);
    ct_log_at("info");
    log = ct_compile_in_processes(n);
    compiles = ct_count_lines(log, "info: compiled ");
    if (compiles != 1)
        fputs(log, stderr);
    ck_assert_msg(compiles == 1, "%d compiles of one key by %d processes "
                  "(their log above)", compiles, n);
    return log;
}

void
ct_log_at(const char *level)
{
    setenv("KDTREE_LOG", level, 1);
    kdt_log_reload();
}

TCase *
ct_tcase(const char *name, int timeout_s)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, ct_setup, ct_teardown);
    tcase_set_timeout(tc, timeout_s);
    return tc;
}

Suite *
ct_suite(const char *name, TCase *tc)
{
    Suite *s = suite_create(name);

    suite_add_tcase(s, tc);
    return s;
}
