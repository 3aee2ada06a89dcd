/*
 * The DRM nodes of two simulated GPUs, as libdrm finds them: GPU i has the
 * primary node /dev/dri/card<i> and the render node /dev/dri/renderD<128+i>,
 * and no /dev/dri/card<128+i>. libdrm 2.4.12x and later (xf86drm.c,
 * drmGetMinorType) type a node by which of /dev/dri/card<minor> and
 * /dev/dri/renderD<minor> exists, in that order; a card<128> would make
 * every render fd a primary node, and amdgpu_device_initialize would then
 * ask the kernel for DRM authentication (DRM_IOCTL_GET_CLIENT). Prints "ok"
 * and exits 0, or names what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int fail(const char *what, const char *path)
{
	printf("FAIL: %s %s (errno %d)\n", what, path, errno);
	return 1;
}

int main(void)
{
	const char *exist[] = {"/dev/dri/card0", "/dev/dri/card1", "/dev/dri/renderD128", "/dev/dri/renderD129"};
	const char *absent[] = {"/dev/dri/card128", "/dev/dri/card129", "/dev/dri/card2", "/dev/dri/renderD130"};
	struct stat st;
	for (unsigned i = 0; i < sizeof exist / sizeof exist[0]; i++) {
		if (access(exist[i], F_OK) != 0) return fail("access", exist[i]);
		if (stat(exist[i], &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 226)
			return fail("stat", exist[i]);
	}
	for (unsigned i = 0; i < sizeof absent / sizeof absent[0]; i++) {
		errno = 0;
		if (access(absent[i], F_OK) == 0 || errno != ENOENT) return fail("access succeeds on", absent[i]);
		errno = 0;
		if (stat(absent[i], &st) == 0 || errno != ENOENT) return fail("stat succeeds on", absent[i]);
	}
	int fd = open("/dev/dri/renderD129", O_RDWR | O_CLOEXEC);
	if (fd < 0) return fail("open", "/dev/dri/renderD129");
	if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 226 || minor(st.st_rdev) != 129)
		return fail("fstat", "/dev/dri/renderD129");
	close(fd);
	printf("ok\n");
	return 0;
}
