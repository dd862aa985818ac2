/*
 * cache/publish.c: writing one entry into the user's cache directory so
 * that no reader, and no crash, ever exposes a partial file.
 *
 * The entry is written to a temp file in the same directory (same file
 * system, so rename is atomic), fsync'ed and renamed over the final name
 * (the directory is not fsync'ed: see kdt_cache_publish).  A
 * process killed before the rename leaves only a temp file, which readers
 * never open (different name) and kdt_cache_sweep_temps() removes.
 * On the miss path this runs on the publishing thread (cache/async.c), so
 * it reads no environment and sets no last error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "base/error.h"

/* Creates `path` and its missing parents with mode 0700 (only what we
 * create; an existing parent is left as it is). */
static int
mkdir_p(const char *path)
{
    char *p = strdup(path), *s;
    int r = 0;

    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    for (s = p + 1; ; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            r = -1;
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    return r;
}

static int
write_all(int fd, const void *buf, size_t size)
{
    size_t done = 0;

    while (done < size) {
        ssize_t w = write(fd, (const char *)buf + done, size - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* The temp names carry the host so that the sweep only judges writers it
 * can see (a shared home directory is written from several hosts, whose
 * pids mean nothing here). */
void
kdt_cache_host_tag(char *out, size_t size)
{
    char h[256];
    size_t i, j = 0;

    if (gethostname(h, sizeof h) != 0)
        h[0] = '\0';
    h[sizeof h - 1] = '\0';
    for (i = 0; h[i] && j + 1 < size && j < 40; i++) {
        char c = h[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '-')
            out[j++] = c;
    }
    if (j == 0 && size > 4) {
        memcpy(out, "host", 4);
        j = 4;
    }
    out[j] = '\0';
}

unsigned long
kdt_cache_publish_delay_us(void)
{
    const char *v = getenv("KDTREE_CACHE_TEST_PUBLISH_DELAY_US");
    return v ? strtoul(v, NULL, 10) : 0;
}

const char *
kdt_cache_publish_gate(void)
{
    const char *v = getenv("KDTREE_CACHE_TEST_PUBLISH_GATE");
    return v && *v ? v : NULL;
}

/* The gate hook: waits until `gate` exists, polling each millisecond, for
 * at most 30 s (a test that forgets to open it is slow, not hung). */
static void
wait_for_gate(const char *gate)
{
    for (int i = 0; i < 30000 && access(gate, F_OK) != 0; i++)
        usleep(1000);
}

int
kdt_cache_publish(const char *base, const kdt_key *key, const void *data,
                  size_t size, int durable, unsigned long delay,
                  const char *gate, char *why, size_t why_size)
{
    static atomic_ulong counter;
    char hex[33], host[48], w[160];
    char *dir = NULL, *tmp = NULL, *fin = NULL;
    struct stat st;
    size_t len;
    int fd = -1, saved, created = 0;

    dir = kdt_cache_entry_dir(base);
    if (!dir) {
        errno = ENOMEM;
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    if (mkdir_p(dir) != 0) {
        saved = errno;
        snprintf(why, why_size, "cannot create %s: %s", dir, strerror(saved));
        goto fail;
    }
    if (stat(dir, &st) != 0) {
        saved = errno;
        snprintf(why, why_size, "%s: %s", dir, strerror(saved));
        goto fail;
    }
    if (!S_ISDIR(st.st_mode)
        || kdt_cache_trusted(&st, 0, w, sizeof w) != 0) {
        saved = EACCES;
        snprintf(why, why_size, "%s refused: %s", dir,
                 S_ISDIR(st.st_mode) ? w : "not a directory");
        goto fail;
    }
    kdt_key_hex(key, hex);
    kdt_cache_host_tag(host, sizeof host);
    len = strlen(dir) + 160;
    tmp = malloc(len);
    fin = malloc(len);
    if (!tmp || !fin) {
        saved = ENOMEM;
        snprintf(why, why_size, "out of memory");
        goto fail;
    }
    snprintf(tmp, len, "%s/.%s.%ld.%lu.%s.tmp", dir, hex, (long)getpid(),
             (unsigned long)atomic_fetch_add(&counter, 1), host);
    snprintf(fin, len, "%s/%s.kdt", dir, hex);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
              0600);
    if (fd < 0) {
        saved = errno;
        snprintf(why, why_size, "cannot create a temp file in %s: %s", dir,
                 strerror(saved));
        goto fail;
    }
    created = 1;
    if ((delay || gate) && size > 1) {
        if (write_all(fd, data, size / 2) != 0)
            goto write_fail;
        if (delay)
            usleep((useconds_t)delay);
        if (gate)
            wait_for_gate(gate);
        if (write_all(fd, (const char *)data + size / 2, size - size / 2) != 0)
            goto write_fail;
    } else if (write_all(fd, data, size) != 0) {
        goto write_fail;
    }
    if (durable && fsync(fd) != 0)
        goto write_fail;
    if (close(fd) != 0) {
        fd = -1;
        goto write_fail;
    }
    fd = -1;
    if (rename(tmp, fin) != 0) {
        saved = errno;
        snprintf(why, why_size, "cannot rename into %s: %s", fin,
                 strerror(saved));
        goto fail;
    }
    /* The directory is not fsync'ed: the entry's bytes are durable before
     * the rename, so after a power cut its name either holds the whole
     * entry or is absent, and a lost rename costs one recompile.  That
     * fsync cost a cold start about 0.3 ms a publish. */
    free(tmp);
    free(fin);
    free(dir);
    return 0;

write_fail:
    saved = errno;
    snprintf(why, why_size, "cannot write %s: %s", tmp, strerror(saved));
fail:
    if (fd >= 0)
        close(fd);
    if (created)
        (void)unlink(tmp);
    free(tmp);
    free(fin);
    free(dir);
    errno = saved;
    return -1;
}
