/*
 * The kernel interface of the simulated driver: an LD_PRELOAD library that
 * interposes the C library's file calls, the way Mesa's drm-shim does for
 * DRM drivers, so that unmodified ROCm user space (the thunk libhsakmt,
 * libdrm, ROCr, HIP) finds an AMD GPU:
 *
 *   - /dev/kfd and /dev/dri/renderD<M> open as files of their own (a memfd
 *     each, so every open is a distinct file, as libdrm requires); fstat says
 *     character device 226:M for a render node; ioctl goes to kfd.c; mmap at
 *     an offset KFD handed out maps that part of the device memory
 *     (memory.c); dup and fcntl(F_DUPFD*) copies stay device files;
 *   - the sysfs paths of sysfs.c are redirected to the generated files;
 *   - everything else goes to the C library untouched.
 *
 * The simulated driver's state is the KFD process's: it outlives closing
 * /dev/kfd (KFD keeps a process until it exits), and a forked child starts
 * a new one (pthread_atfork), as KFD does for a new mm.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "kfdsim_int.h"

_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat and stat64 are one layout on LP64 Linux");

/* The pre-2.33 glibc stat entry points, which older binaries still call. */
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
char *__realpath_chk(const char *path, char *resolved, size_t n);

#define EXPORT __attribute__((visibility("default")))

/* ---- the C library's own functions -------------------------------------- */

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static FILE *(*real_fopen)(const char *, const char *);
static DIR *(*real_opendir)(const char *);
static int (*real_stat)(const char *, struct stat *);
static int (*real_lstat)(const char *, struct stat *);
static int (*real_fstat)(int, struct stat *);
static int (*real_fstatat)(int, const char *, struct stat *, int);
static int (*real_statx)(int, const char *, int, unsigned, struct statx *);
static int (*real_access)(const char *, int);
static int (*real_faccessat)(int, const char *, int, int);
static ssize_t (*real_readlink)(const char *, char *, size_t);
static ssize_t (*real_readlinkat)(int, const char *, char *, size_t);
static char *(*real_realpath)(const char *, char *);
static int (*real_ioctl)(int, unsigned long, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_close)(int);
static int (*real_fcntl)(int, int, ...);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);

#define RESOLVE(name)                                                  \
	do {                                                           \
		if (real_##name == NULL) *(void **)&real_##name = dlsym(RTLD_NEXT, #name); \
	} while (0)

static void resolve_all(void)
{
	RESOLVE(open);
	RESOLVE(openat);
	RESOLVE(fopen);
	RESOLVE(opendir);
	RESOLVE(stat);
	RESOLVE(lstat);
	RESOLVE(fstat);
	RESOLVE(fstatat);
	RESOLVE(statx);
	RESOLVE(access);
	RESOLVE(faccessat);
	RESOLVE(readlink);
	RESOLVE(readlinkat);
	RESOLVE(realpath);
	RESOLVE(ioctl);
	RESOLVE(mmap);
	RESOLVE(close);
	RESOLVE(fcntl);
	RESOLVE(dup);
	RESOLVE(dup2);
	RESOLVE(dup3);
}

int kfdsim_real_close(int fd)
{
	resolve_all();
	return real_close(fd);
}

/* ---- device files -------------------------------------------------------- */

#define MAX_FDS 65536
enum { FD_NONE = 0, FD_KFD = 1, FD_RENDER = 2 };
/* kind | gpu << 8 per descriptor */
static uint32_t fd_kind[MAX_FDS];
static int open_kfd; /* /dev/kfd descriptors open */

#define KFD_CHAR_MAJOR 511

static void fd_set_kind(int fd, uint32_t kind)
{
	if (fd < 0 || fd >= MAX_FDS) return;
	uint32_t old = __atomic_exchange_n(&fd_kind[fd], kind, __ATOMIC_ACQ_REL);
	if ((old & 0xff) == FD_KFD) __atomic_sub_fetch(&open_kfd, 1, __ATOMIC_ACQ_REL);
	if ((kind & 0xff) == FD_KFD) __atomic_add_fetch(&open_kfd, 1, __ATOMIC_ACQ_REL);
}

static uint32_t fd_get(int fd)
{
	if (fd < 0 || fd >= MAX_FDS) return 0;
	return __atomic_load_n(&fd_kind[fd], __ATOMIC_ACQUIRE);
}

/* Render nodes may stay open: the thunks keep them for the process's life
 * (fmm.c, drm_render_fds), even across closing and reopening KFD. */
int kfdsim_device_in_use(void) { return __atomic_load_n(&open_kfd, __ATOMIC_ACQUIRE) > 0; }

int kfdsim_fd_render_gpu(int fd)
{
	uint32_t k = fd_get(fd);
	return (k & 0xff) == FD_RENDER ? (int)(k >> 8) : -1;
}

/* Which device a path names: FD_KFD, FD_RENDER | gpu << 8, or 0. */
static uint32_t device_of(const char *path, int *card)
{
	if (card) *card = -1;
	if (path == NULL || strncmp(path, "/dev/", 5) != 0) return 0;
	if (strcmp(path, "/dev/kfd") == 0) return FD_KFD;
	unsigned m;
	char tail;
	int is_card = 0;
	if (sscanf(path, "/dev/dri/renderD%u%c", &m, &tail) != 1) {
		if (sscanf(path, "/dev/dri/card%u%c", &m, &tail) != 1) return 0;
		is_card = 1;
	}
	if (kfdsim_config_ensure() != 0) return 0;
	for (int i = 0; i < kfdsim_num_gpus; i++)
		if ((!is_card && kfdsim_gpus[i].render_minor == m) || (is_card && (unsigned)i == m)) {
			/* GPU i's primary node is card<i> (minor i), its render
			 * node renderD<128+i>; there is no card<128+i>. libdrm
			 * 2.4.12x and later (xf86drm.c drmGetMinorType) type a
			 * node by which of /dev/dri/card<minor> and
			 * /dev/dri/renderD<minor> exists, in that order, and
			 * amdgpu_device_initialize asks the kernel for the
			 * client's authentication (DRM_IOCTL_GET_CLIENT) unless
			 * the fd is a render node. A card node exists to stat,
			 * not to open. */
			if (is_card) {
				if (card) *card = (int)m;
				return 0;
			}
			return FD_RENDER | (uint32_t)i << 8;
		}
	return 0;
}

static void fake_stat(struct stat *st, uint32_t kind, int card)
{
	memset(st, 0, sizeof *st);
	st->st_mode = S_IFCHR | 0666;
	st->st_nlink = 1;
	st->st_blksize = 4096;
	if (card >= 0) st->st_rdev = makedev(226, (unsigned)card);
	else if ((kind & 0xff) == FD_KFD) st->st_rdev = makedev(KFD_CHAR_MAJOR, 0);
	else st->st_rdev = makedev(226, kfdsim_gpus[kind >> 8].render_minor);
	st->st_ino = st->st_rdev;
	st->st_dev = 5; /* devtmpfs */
}

static pid_t process_pid;

static void after_fork_child(void)
{
	/* A new KFD process (kfd_process is per mm): nothing of the parent's
	 * device state is the child's. The inherited descriptors stay device
	 * files, as they are on Linux; the thunk closes and reopens them. */
	kfdsim_config_after_fork();
	kfdsim_sysfs_after_fork();
	kfdsim_queues_reset();
	kfdsim_events_reset();
	kfdsim_memory_reset();
	process_pid = getpid();
}

__attribute__((constructor)) static void shim_init(void)
{
	resolve_all();
	process_pid = getpid();
	pthread_atfork(NULL, NULL, after_fork_child);
}

static int open_device(uint32_t kind, int flags)
{
	if (kfdsim_config_ensure() != 0) {
		fprintf(stderr, "kfdsim: open /dev/kfd fails: %s\n", kfdsim_config_error());
		errno = ENOENT;
		return -1;
	}
	int fd = memfd_create((kind & 0xff) == FD_KFD ? "kfdsim-kfd" : "kfdsim-render",
			      (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0) return -1;
	if (fd >= MAX_FDS) {
		real_close(fd);
		errno = EMFILE;
		return -1;
	}
	fd_set_kind(fd, kind);
	KFDSIM_DEBUG("open %s -> fd %d", (kind & 0xff) == FD_KFD ? "/dev/kfd" : "render node", fd);
	return fd;
}

/* ---- sysfs redirection --------------------------------------------------- */

/* Rewrites a path the simulated driver shows into buf; returns buf, or path
 * when it is not one of them. */
static const char *redirect(const char *path, char *buf, size_t n)
{
	if (path == NULL) return path;
	const char *rest = NULL, *sub = NULL;
	char tmp[64];
	if (strncmp(path, "/sys/", 5) == 0) {
		unsigned a, b;
		int off = 0;
		if (strncmp(path, "/sys/devices/virtual/kfd/kfd", 28) == 0 && (path[28] == '/' || path[28] == '\0')) {
			sub = "kfd";
			rest = path + 28;
		} else if (strncmp(path, "/sys/class/kfd/kfd", 18) == 0 && (path[18] == '/' || path[18] == '\0')) {
			sub = "kfd";
			rest = path + 18;
		} else if ((sscanf(path, "/sys/devices/system/node/node%u/cpu%u/cache%n", &a, &b, &off) == 2 ||
			    sscanf(path, "/sys/devices/system/cpu/cpu%u/cache%n", &b, &off) == 1) &&
			   off > 0 && (path[off] == '/' || path[off] == '\0')) {
			snprintf(tmp, sizeof tmp, "cpu/cpu%u/cache", b);
			sub = tmp;
			rest = path + off;
		} else if (sscanf(path, "/sys/dev/char/226:%u%n", &a, &off) == 1 && off > 0 &&
			   (path[off] == '/' || path[off] == '\0')) {
			snprintf(tmp, sizeof tmp, "devchar/226:%u", a);
			sub = tmp;
			rest = path + off;
		}
	} else if (strncmp(path, "/dev/dri", 8) == 0 && (path[8] == '\0' || (path[8] == '/' && path[9] == '\0'))) {
		sub = "dev/dri";
		rest = "";
	}
	if (sub == NULL) return path;
	const char *root = kfdsim_sysfs_root();
	if (root == NULL) return path;
	snprintf(buf, n, "%s/%s%s", root, sub, rest);
	return buf;
}

#define PATHBUF 1024

/* Path tests that tolerate NULL (glibc declares the paths non-null; callers
 * may still pass NULL, which the C library then rejects). */
static int is_abs(const char *p) { return p != NULL && p[0] == '/'; }
static int is_empty(const char *p) { return p == NULL || p[0] == '\0'; }

/* ---- interposed functions ------------------------------------------------ */

/* Whether open's variadic mode argument was passed (O_TMPFILE includes
 * O_DIRECTORY's bit, which alone passes none). */
static int needs_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

static int do_open(const char *path, int flags, mode_t mode)
{
	resolve_all();
	uint32_t dev = device_of(path, NULL);
	if (dev) return open_device(dev, flags);
	char buf[PATHBUF];
	return real_open(redirect(path, buf, sizeof buf), flags, mode);
}

EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (needs_mode(flags)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	return do_open(path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...) __attribute__((alias("open")));
EXPORT int __open_2(const char *path, int flags) { return do_open(path, flags, 0); }
EXPORT int __open64_2(const char *path, int flags) { return do_open(path, flags, 0); }

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	resolve_all();
	if (is_abs(path)) {
		uint32_t dev = device_of(path, NULL);
		if (dev) return open_device(dev, flags);
		char buf[PATHBUF];
		return real_openat(dirfd, redirect(path, buf, sizeof buf), flags, mode);
	}
	return real_openat(dirfd, path, flags, mode);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (needs_mode(flags)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	return do_openat(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));
EXPORT int __openat_2(int dirfd, const char *path, int flags) { return do_openat(dirfd, path, flags, 0); }
EXPORT int __openat64_2(int dirfd, const char *path, int flags) { return do_openat(dirfd, path, flags, 0); }

EXPORT FILE *fopen(const char *path, const char *mode)
{
	resolve_all();
	if (device_of(path, NULL)) {
		errno = EACCES; /* device files are opened with open(2) */
		return NULL;
	}
	char buf[PATHBUF];
	return real_fopen(redirect(path, buf, sizeof buf), mode);
}

EXPORT FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));

EXPORT DIR *opendir(const char *path)
{
	resolve_all();
	char buf[PATHBUF];
	return real_opendir(redirect(path, buf, sizeof buf));
}

static int path_stat(const char *path, struct stat *st, int follow)
{
	resolve_all();
	int card;
	uint32_t dev = device_of(path, &card);
	if (dev || card >= 0) {
		fake_stat(st, dev, card);
		return 0;
	}
	char buf[PATHBUF];
	const char *p = redirect(path, buf, sizeof buf);
	return follow ? real_stat(p, st) : real_lstat(p, st);
}

EXPORT int stat(const char *path, struct stat *st) { return path_stat(path, st, 1); }
EXPORT int stat64(const char *path, struct stat64 *st) { return path_stat(path, (struct stat *)st, 1); }
EXPORT int lstat(const char *path, struct stat *st) { return path_stat(path, st, 0); }
EXPORT int lstat64(const char *path, struct stat64 *st) { return path_stat(path, (struct stat *)st, 0); }
EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return path_stat(path, st, 1);
}
EXPORT int __xstat64(int ver, const char *path, struct stat64 *st) { return __xstat(ver, path, (struct stat *)st); }
EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return path_stat(path, st, 0);
}
EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st) { return __lxstat(ver, path, (struct stat *)st); }

EXPORT int fstat(int fd, struct stat *st)
{
	resolve_all();
	uint32_t k = fd_get(fd);
	if (k) {
		fake_stat(st, k, -1);
		return 0;
	}
	return real_fstat(fd, st);
}
EXPORT int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	(void)ver;
	return fstat(fd, st);
}
EXPORT int __fxstat64(int ver, int fd, struct stat64 *st) { return __fxstat(ver, fd, (struct stat *)st); }

EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	resolve_all();
	if ((flags & AT_EMPTY_PATH) && is_empty(path) && fd_get(dirfd)) return fstat(dirfd, st);
	if (is_abs(path)) {
		int card;
		uint32_t dev = device_of(path, &card);
		if (dev || card >= 0) {
			fake_stat(st, dev, card);
			return 0;
		}
		char buf[PATHBUF];
		return real_fstatat(dirfd, redirect(path, buf, sizeof buf), st, flags);
	}
	return real_fstatat(dirfd, path, st, flags);
}
EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return fstatat(dirfd, path, (struct stat *)st, flags);
}
EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	(void)ver;
	return fstatat(dirfd, path, st, flags);
}
EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	return __fxstatat(ver, dirfd, path, (struct stat *)st, flags);
}

EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
	resolve_all();
	uint32_t k = 0;
	int card = -1;
	if ((flags & AT_EMPTY_PATH) && is_empty(path)) k = fd_get(dirfd);
	else if (is_abs(path)) k = device_of(path, &card);
	if (k || card >= 0) {
		struct stat st;
		fake_stat(&st, k, card);
		memset(stx, 0, sizeof *stx);
		stx->stx_mask = STATX_BASIC_STATS;
		stx->stx_mode = (uint16_t)st.st_mode;
		stx->stx_nlink = 1;
		stx->stx_ino = st.st_ino;
		stx->stx_rdev_major = major(st.st_rdev);
		stx->stx_rdev_minor = minor(st.st_rdev);
		stx->stx_dev_major = 0;
		stx->stx_dev_minor = 5;
		stx->stx_blksize = 4096;
		return 0;
	}
	char buf[PATHBUF];
	const char *p = is_abs(path) ? redirect(path, buf, sizeof buf) : path;
	return real_statx(dirfd, p, flags, mask, stx);
}

EXPORT int access(const char *path, int mode)
{
	resolve_all();
	int card;
	if (device_of(path, &card) || card >= 0) return 0;
	char buf[PATHBUF];
	return real_access(redirect(path, buf, sizeof buf), mode);
}

EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	resolve_all();
	if (is_abs(path)) {
		int card;
		if (device_of(path, &card) || card >= 0) return 0;
		char buf[PATHBUF];
		return real_faccessat(dirfd, redirect(path, buf, sizeof buf), mode, flags);
	}
	return real_faccessat(dirfd, path, mode, flags);
}

EXPORT ssize_t readlink(const char *path, char *out, size_t n)
{
	resolve_all();
	char buf[PATHBUF];
	return real_readlink(redirect(path, buf, sizeof buf), out, n);
}

EXPORT ssize_t readlinkat(int dirfd, const char *path, char *out, size_t n)
{
	resolve_all();
	char buf[PATHBUF];
	const char *p = is_abs(path) ? redirect(path, buf, sizeof buf) : path;
	return real_readlinkat(dirfd, p, out, n);
}

EXPORT char *realpath(const char *path, char *resolved)
{
	resolve_all();
	char buf[PATHBUF];
	return real_realpath(redirect(path, buf, sizeof buf), resolved);
}

EXPORT char *__realpath_chk(const char *path, char *resolved, size_t n)
{
	(void)n;
	return realpath(path, resolved);
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	resolve_all();
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	uint32_t k = fd_get(fd);
	if (k == 0) return real_ioctl(fd, req, arg);
	int rc = (k & 0xff) == FD_KFD ? kfdsim_kfd_ioctl(req, arg) : kfdsim_drm_ioctl((int)(k >> 8), req, arg);
	if (rc < 0) {
		KFDSIM_DEBUG("ioctl fd %d req %#lx -> %s", fd, req, strerror(-rc));
		errno = -rc;
		return -1;
	}
	return rc;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	resolve_all();
	if (fd < 0 || fd_get(fd) == 0) return real_mmap(addr, len, prot, flags, fd, off);
	/* A BO, doorbell page or MMIO page at the offset KFD returned: the
	 * device memory's pages, shared with the GPU's view of them. Mappings
	 * the thunk makes without CPU access (VRAM without HostAccess) map them
	 * too: the simulated GPU reaches its memory through the same pages. */
	int backing = kfdsim_mem_backing_fd();
	if (backing < 0) {
		errno = -backing;
		return MAP_FAILED;
	}
	(void)prot;
	int f = (flags & ~(MAP_PRIVATE | MAP_SHARED | MAP_SHARED_VALIDATE)) | MAP_SHARED;
	void *p = real_mmap(addr, len, PROT_READ | PROT_WRITE, f, backing, off);
	KFDSIM_DEBUG("mmap fd %d offset %#llx len %#zx at %p -> %p", fd, (unsigned long long)off, len, addr, p);
	return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

EXPORT int close(int fd)
{
	resolve_all();
	if (fd_get(fd)) {
		fd_set_kind(fd, 0);
		KFDSIM_DEBUG("close device fd %d", fd);
	}
	return real_close(fd);
}

static int dup_result(int from, int to)
{
	if (to >= 0) {
		uint32_t k = fd_get(from);
		if (k) fd_set_kind(to, k);
	}
	return to;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
	resolve_all();
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	int rc = real_fcntl(fd, cmd, arg);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) dup_result(fd, rc);
	return rc;
}

EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

EXPORT int dup(int fd)
{
	resolve_all();
	return dup_result(fd, real_dup(fd));
}

EXPORT int dup2(int fd, int to)
{
	resolve_all();
	if (fd != to && fd_get(to)) fd_set_kind(to, 0);
	return dup_result(fd, real_dup2(fd, to));
}

EXPORT int dup3(int fd, int to, int flags)
{
	resolve_all();
	if (fd != to && fd_get(to)) fd_set_kind(to, 0);
	return dup_result(fd, real_dup3(fd, to, flags));
}
