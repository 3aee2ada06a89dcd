/*
 * A process that uses the simulated driver through Debian's real thunk,
 * forks while KFD is open, and uses it in the child: the child is a new KFD
 * process (the thunk reopens /dev/kfd after a fork, openclose.c
 * clear_after_fork), with device memory of its own, and the parent's
 * driver state (its event, its buffer's contents) goes on undisturbed.
 */
#include <hsakmt.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (1 << 20)

static int open_kfd(const char *who)
{
	HsaSystemProperties sp;
	if (hsaKmtOpenKFD() != HSAKMT_STATUS_SUCCESS || hsaKmtAcquireSystemProperties(&sp) != HSAKMT_STATUS_SUCCESS) {
		fprintf(stderr, "%s: open failed\n", who);
		return 1;
	}
	return 0;
}

static HsaEvent *event(const char *who)
{
	HsaEventDescriptor d;
	memset(&d, 0, sizeof d);
	d.EventType = HSA_EVENTTYPE_SIGNAL;
	HsaEvent *ev = NULL;
	if (hsaKmtCreateEvent(&d, false, false, &ev) != HSAKMT_STATUS_SUCCESS) fprintf(stderr, "%s: CreateEvent failed\n", who);
	return ev;
}

static unsigned char *vram(const char *who, int fill)
{
	HsaMemFlags f;
	memset(&f, 0, sizeof f);
	f.ui32.HostAccess = 1;
	f.ui32.NonPaged = 1;
	void *p = NULL;
	if (hsaKmtAllocMemory(1, SIZE, f, &p) != HSAKMT_STATUS_SUCCESS) {
		fprintf(stderr, "%s: AllocMemory failed\n", who);
		return NULL;
	}
	memset(p, fill, SIZE);
	return p;
}

static int set_and_wait(const char *who, HsaEvent *ev)
{
	if (hsaKmtSetEvent(ev) != HSAKMT_STATUS_SUCCESS || hsaKmtWaitOnEvent(ev, 1000) != HSAKMT_STATUS_SUCCESS) {
		fprintf(stderr, "%s: set/wait failed\n", who);
		return 1;
	}
	return 0;
}

int main(void)
{
	if (open_kfd("parent")) return 1;
	HsaEvent *ev = event("parent");
	unsigned char *mine = vram("parent", 0x5a);
	if (ev == NULL || mine == NULL || set_and_wait("parent", ev)) return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) return 1;
	if (pid == 0) {
		if (open_kfd("child")) _exit(1);
		HsaEvent *cev = event("child");
		unsigned char *theirs = vram("child", 0xa5);
		if (cev == NULL || theirs == NULL || set_and_wait("child", cev)) _exit(1);
		printf("child: ok\n");
		fflush(stdout);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "child failed (status %#x)\n", status);
		return 1;
	}
	for (int i = 0; i < SIZE; i++)
		if (mine[i] != 0x5a) {
			fprintf(stderr, "parent: its buffer changed at %d (%#x) while the child used the device\n", i, mine[i]);
			return 1;
		}
	if (set_and_wait("parent after the child", ev)) return 1;
	printf("parent: ok\n");
	return 0;
}
