/*
 * cbthread.c lets lib_test.go call the queue-error trampoline the way ROCr
 * does: from a thread the Go runtime did not create. Built by the test with
 * the system C compiler as a shared library; not part of the package.
 */
#include <pthread.h>
#include <stdint.h>

typedef void (*queue_error_cb)(uint32_t status, void *queue, void *data);

struct call {
  queue_error_cb cb;
  uint32_t status;
  void *queue;
  void *data;
};

static void *run(void *p) {
  struct call *c = p;
  c->cb(c->status, c->queue, c->data);
  return 0;
}

/* call_on_thread runs cb(status, queue, data) on a new pthread and waits. */
int call_on_thread(queue_error_cb cb, uint32_t status, void *queue, void *data) {
  pthread_t t;
  struct call c = {cb, status, queue, data};
  if (pthread_create(&t, 0, run, &c) != 0) return -1;
  return pthread_join(t, 0);
}
