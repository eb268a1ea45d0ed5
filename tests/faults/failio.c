/* An LD_PRELOAD shim for fault-injection tests of hitl-ledger: while the file named by
 * $HITL_FAIL_TRIGGER exists, it fails the calls its content names, then passes every call
 * through unchanged once the file is removed. Built by the tests with `cc -shared -fPIC`.
 *
 *   "sync"   fsync, fdatasync and sync_file_range fail with EIO (a failing disk);
 *   "enospc" write, pwrite, writev, pwritev and fallocate fail with ENOSPC (a full disk).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int active(const char *mode) {
    const char *path = getenv("HITL_FAIL_TRIGGER");
    if (!path) return 0;
    int saved = errno;
    /* Read the trigger with the raw syscall wrapper of read, never through our own write
       hooks. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { errno = saved; return 0; }
    char buf[16] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    errno = saved;
    if (n <= 0) return 0;
    return strncmp(buf, mode, strlen(mode)) == 0;
}

/* Only regular files fail: sockets (the HTTP answers) and terminals never do. */
static int regular(int fd) {
    struct stat st;
    int saved = errno;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    errno = saved;
    return ok;
}

#define NEXT(name) static __typeof__(name) *next; if (!next) next = dlsym(RTLD_NEXT, #name)

int fsync(int fd) { NEXT(fsync); if (regular(fd) && active("sync")) { errno = EIO; return -1; } return next(fd); }
int fdatasync(int fd) { NEXT(fdatasync); if (regular(fd) && active("sync")) { errno = EIO; return -1; } return next(fd); }
int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags) {
    NEXT(sync_file_range);
    if (regular(fd) && active("sync")) { errno = EIO; return -1; }
    return next(fd, off, n, flags);
}
ssize_t write(int fd, const void *b, size_t n) {
    NEXT(write);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, b, n);
}
ssize_t pwrite(int fd, const void *b, size_t n, off_t off) {
    NEXT(pwrite);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, b, n, off);
}
ssize_t pwrite64(int fd, const void *b, size_t n, off64_t off) {
    NEXT(pwrite64);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, b, n, off);
}
ssize_t writev(int fd, const struct iovec *v, int c) {
    NEXT(writev);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, v, c);
}
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t off) {
    NEXT(pwritev);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, v, c, off);
}
int fallocate(int fd, int mode, off_t off, off_t len) {
    NEXT(fallocate);
    if (regular(fd) && active("enospc")) { errno = ENOSPC; return -1; }
    return next(fd, mode, off, len);
}
int posix_fallocate(int fd, off_t off, off_t len) {
    NEXT(posix_fallocate);
    if (regular(fd) && active("enospc")) return ENOSPC;
    return next(fd, off, len);
}
