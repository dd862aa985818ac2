/*
 * cache/file.c: the cache's file I/O and its trust rules (see
 * cache/file.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/layout.h"

int
kdt_cache_trusted(const struct stat *st, int allow_root, char *why,
                  size_t why_size)
{
    uid_t me = geteuid();

    if (st->st_uid != me && !(allow_root && st->st_uid == 0)) {
        snprintf(why, why_size, "owned by uid %lu, not %lu",
                 (unsigned long)st->st_uid, (unsigned long)me);
        return -1;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_size, "writable by group or others (mode %03o)",
                 (unsigned)(st->st_mode & 0777));
        return -1;
    }
    return 0;
}

const char *
kdt_cache_type_name(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "of unknown type";
    }
}

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

/* -1 with errno = EACCES and the reason: the common end of a refusal.
 * `what` is "" for the base directory itself (the caller names it). */
static int
refuse(char *why, size_t why_size, const char *what, const char *reason)
{
    snprintf(why, why_size, "%s%srefused: %s", what, *what ? " " : "",
             reason);
    errno = EACCES;
    return -1;
}

/* The base directory, checked: 0 with *fd, 1 absent, -1 refused. */
static int
open_base(const char *base, int flags, int *fd, char *why, size_t why_size)
{
    int allow_root = (flags & KDT_DIR_ALLOW_ROOT) != 0;
    char w[160];
    struct stat st;
    int saved;

    if (lstat(base, &st) != 0) {
        if (errno != ENOENT || !(flags & KDT_DIR_CREATE)) {
            saved = errno;
            if (saved == ENOENT)
                return 1;
            snprintf(why, why_size, "%s", strerror(saved));
            errno = saved;
            return -1;
        }
        if (mkdir_p(base) != 0) {
            saved = errno;
            snprintf(why, why_size, "cannot create it: %s", strerror(saved));
            errno = saved;
            return -1;
        }
    } else if (S_ISLNK(st.st_mode) && (flags & KDT_DIR_NO_LINK)) {
        return refuse(why, why_size, "", "a symbolic link");
    } else if (S_ISLNK(st.st_mode) && st.st_uid != geteuid()
               && !(allow_root && st.st_uid == 0)) {
        /* (A link's own mode means nothing; only its owner counts.) */
        snprintf(w, sizeof w, "a symbolic link owned by uid %lu",
                 (unsigned long)st.st_uid);
        return refuse(why, why_size, "", w);
    }
    /* (O_NOFOLLOW: a link made after the lstat is refused too.) */
    *fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC
                         | (flags & KDT_DIR_NO_LINK ? O_NOFOLLOW : 0));
    if (*fd < 0) {
        saved = errno;
        if (saved == ELOOP)
            return refuse(why, why_size, "", "a symbolic link");
        snprintf(why, why_size, "%s", strerror(saved));
        errno = saved;
        return saved == ENOENT ? 1 : -1;
    }
    if (fstat(*fd, &st) != 0 || !S_ISDIR(st.st_mode)
        || kdt_cache_trusted(&st, allow_root, w, sizeof w) != 0) {
        int r = refuse(why, why_size, "",
                       S_ISDIR(st.st_mode) ? w : "not a directory");
        close(*fd);
        *fd = -1;
        return r;
    }
    return 0;
}

int
kdt_cache_dir_open(const char *base, int flags, int *fd, char *why,
                   size_t why_size)
{
    const char *sub = kdt_layout_subdir();
    int allow_root = (flags & KDT_DIR_ALLOW_ROOT) != 0;
    char what[32], w[160];
    struct stat st;
    int bfd, dfd, r, saved;

    *fd = -1;
    why[0] = '\0';
    r = open_base(base, flags, &bfd, why, why_size);
    if (r != 0)
        return r;
    snprintf(what, sizeof what, "%s/", sub);
    dfd = openat(bfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno == ENOENT && (flags & KDT_DIR_CREATE)) {
        if (mkdirat(bfd, sub, 0700) != 0 && errno != EEXIST) {
            saved = errno;
            snprintf(why, why_size, "cannot create %s: %s", what,
                     strerror(saved));
            close(bfd);
            errno = saved;
            return -1;
        }
        dfd = openat(bfd, sub,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (dfd < 0) {
        saved = errno;
        r = -1;
        if (saved == ENOENT) {
            r = 1;
        } else if (fstatat(bfd, sub, &st, AT_SYMLINK_NOFOLLOW) == 0
                   && !S_ISDIR(st.st_mode)) {
            snprintf(w, sizeof w, "%s, not a directory",
                     kdt_cache_type_name(st.st_mode));
            r = refuse(why, why_size, what, w);
            saved = errno;
        } else {
            snprintf(why, why_size, "%s: %s", what, strerror(saved));
        }
        close(bfd);
        errno = saved;
        return r;
    }
    close(bfd);
    if (fstat(dfd, &st) != 0
        || kdt_cache_trusted(&st, allow_root, w, sizeof w) != 0) {
        close(dfd);
        return refuse(why, why_size, what, w);
    }
    *fd = dfd;
    return 0;
}

/* `path` made absolute against the working directory, malloc'ed. */
static char *
absolute(const char *path)
{
    char cwd[4096];
    char *s;

    if (path[0] == '/')
        return strdup(path);
    if (!getcwd(cwd, sizeof cwd))
        return strdup(path);
    s = malloc(strlen(cwd) + strlen(path) + 2);
    if (s)
        sprintf(s, "%s/%s", cwd, path);
    return s;
}

/* Appends the components of `rest` to the resolved directory `id`
 * (malloc'ed, reallocated): "." and "" dropped, ".." taking one off (the
 * directories do not exist, so no link can make ".." mean more). */
static char *
append_lexically(char *id, const char *rest)
{
    size_t len = strlen(id);
    char *s = realloc(id, len + strlen(rest) + 2);

    if (!s) {
        free(id);
        return NULL;
    }
    while (*rest) {
        const char *end = strchr(rest, '/');
        size_t n = end ? (size_t)(end - rest) : strlen(rest);
        if (n == 2 && rest[0] == '.' && rest[1] == '.') {
            while (len > 1 && s[len - 1] != '/')
                len--;
            if (len > 1)
                len--;
        } else if (n && !(n == 1 && rest[0] == '.')) {
            if (len > 1 || s[0] != '/')
                s[len++] = '/';
            memcpy(s + len, rest, n);
            len += n;
        }
        rest += n + (end ? 1 : 0);
    }
    s[len] = '\0';
    return s;
}

char *
kdt_cache_dir_id(const char *base)
{
    char *abs = absolute(base), *id = NULL;
    size_t cut;

    if (!abs)
        return NULL;
    /* The longest prefix that exists, resolved; the rest as it reads. */
    for (cut = strlen(abs); !id; ) {
        char c = abs[cut];
        abs[cut] = '\0';
        id = realpath(cut ? abs : "/", NULL);
        abs[cut] = c;
        if (id || cut == 0)
            break;
        while (cut > 0 && abs[cut - 1] != '/')
            cut--;
        while (cut > 0 && abs[cut - 1] == '/')
            cut--;
    }
    if (!id)
        id = strdup("/");
    if (id && abs[cut])
        id = append_lexically(id, abs + cut);
    free(abs);
    return id;
}

/* 1 with the reason when the directory `fd` cannot take a new file. */
static int
dir_unwritable(int fd, char *why, size_t why_size)
{
    struct statvfs vs;

    if (fstatvfs(fd, &vs) == 0 && (vs.f_flag & ST_RDONLY)) {
        snprintf(why, why_size, "%s", strerror(EROFS));
        return 1;
    }
    if (faccessat(fd, ".", W_OK, AT_EACCESS) != 0) {
        snprintf(why, why_size, "%s", strerror(errno));
        return 1;
    }
    /* Root may use the blocks reserved for it; a file system that counts
     * no blocks at all (some FUSE ones) says nothing. */
    if (fstatvfs(fd, &vs) == 0 && vs.f_blocks > 0
        && (geteuid() == 0 ? vs.f_bfree : vs.f_bavail) == 0) {
        snprintf(why, why_size, "%s", strerror(ENOSPC));
        return 1;
    }
    return 0;
}

int
kdt_cache_dir_unwritable(const char *base, char *why, size_t why_size)
{
    char *path = kdt_layout_entry_dir(base);
    size_t cut;
    int r = 0;

    if (!path)
        return 0;
    /* <base>/v1, else base, else the nearest ancestor that exists. */
    for (cut = strlen(path); cut > 0; ) {
        path[cut] = '\0';
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            r = dir_unwritable(fd, why, why_size);
            close(fd);
            break;
        }
        if (errno != ENOENT)
            break;
        while (cut > 0 && path[cut - 1] != '/')
            cut--;
        while (cut > 1 && path[cut - 1] == '/')
            cut--;
    }
    free(path);
    return r;
}

static int
read_all(int fd, void *buf, size_t size)
{
    size_t done = 0;

    while (done < size) {
        ssize_t r = read(fd, (char *)buf + done, size - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0) {
            errno = EIO; /* shorter than it was a moment ago */
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* Opens `name` for reading once fstatat() says it is a regular file, and
 * checks again on the descriptor (it may have been swapped meanwhile).
 * Returns the fd, or -1 with the reason (or -2: absent). */
static int
open_regular(int dir_fd, const char *name, int allow_root, struct stat *st,
             char *why, size_t why_size)
{
    char w[160];
    int fd;

    if (fstatat(dir_fd, name, st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return -2;
        snprintf(why, why_size, "cannot stat: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, why_size, "not a regular file (%s)",
                 kdt_cache_type_name(st->st_mode));
        return -1;
    }
    if (allow_root >= 0
        && kdt_cache_trusted(st, allow_root, w, sizeof w) != 0) {
        snprintf(why, why_size, "%s", w);
        return -1;
    }
    /* O_NONBLOCK: swapped for a FIFO after the check, it cannot block. */
    fd = openat(dir_fd, name,
                O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return -2;
        snprintf(why, why_size, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)
        || (allow_root >= 0
            && kdt_cache_trusted(st, allow_root, w, sizeof w) != 0)) {
        snprintf(why, why_size, "changed while it was opened");
        close(fd);
        return -1;
    }
    return fd;
}

int
kdt_cache_read_entry(int dir_fd, const char *name, int allow_root,
                     void **buf, size_t *size, char *why, size_t why_size)
{
    unsigned char head[KDT_ENTRY_HEADER_SIZE];
    struct stat st;
    uint64_t want;
    void *b;
    int fd, kind;

    *buf = NULL;
    *size = 0;
    fd = open_regular(dir_fd, name, allow_root ? 1 : 0, &st, why, why_size);
    if (fd == -2)
        return 1;
    if (fd < 0)
        return -1;
    if (st.st_size < KDT_ENTRY_HEADER_SIZE
        || (uint64_t)st.st_size > KDT_ENTRY_MAX_SIZE) {
        snprintf(why, why_size, "impossible size %lld",
                 (long long)st.st_size);
        close(fd);
        return -1;
    }
    /* The header first: a file whose length is not the one its header
     * declares (an entry extended by `truncate -s 528M`, junk under an
     * entry's name) is refused after 72 bytes, not read whole.  The rest
     * follows in the same pass, so a lookup reads a file once. */
    if (read_all(fd, head, sizeof head) != 0) {
        snprintf(why, why_size, "cannot read: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (kdt_entry_peek(head, sizeof head, &kind, &want, why, why_size) != 0) {
        close(fd);
        return -1;
    }
    if (want != (uint64_t)st.st_size) {
        snprintf(why, why_size,
                 "size mismatch (file %lld bytes, header says %llu)",
                 (long long)st.st_size, (unsigned long long)want);
        close(fd);
        return -1;
    }
    b = malloc((size_t)st.st_size);
    if (!b) {
        close(fd);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "cache: out of memory (%lld bytes)",
                        (long long)st.st_size);
    }
    memcpy(b, head, sizeof head);
    if (read_all(fd, (char *)b + sizeof head,
                 (size_t)st.st_size - sizeof head) != 0) {
        snprintf(why, why_size, "cannot read: %s", strerror(errno));
        free(b);
        close(fd);
        return -1;
    }
    close(fd);
    *buf = b;
    *size = (size_t)st.st_size;
    return 0;
}

int
kdt_cache_read_head(int dir_fd, const char *name, void *buf, size_t size)
{
    char why[200];
    struct stat st;
    int fd = open_regular(dir_fd, name, -1, &st, why, sizeof why);
    int r;

    if (fd < 0) {
        errno = fd == -2 ? ENOENT : EINVAL;
        return -1;
    }
    r = (uint64_t)st.st_size >= size ? read_all(fd, buf, size) : -1;
    close(fd);
    return r;
}

int
kdt_cache_write_all(int fd, const void *buf, size_t size)
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
