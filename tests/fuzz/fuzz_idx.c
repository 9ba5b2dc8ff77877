/*
** libFuzzer harness for the IDX reader, gzip checks included. lamp_idx_read takes a path (a
** regular file, raw or gzip), so the input goes into an anonymous in-memory file (a regular
** file) and is read back through /proc/self/fd: the real entry point, unchanged, no disk I/O.
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/idx.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0) {
    fd = memfd_create("fuzz_idx", MFD_CLOEXEC);
    if (fd < 0) return 0;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
    if (n <= 0) return 0;
    done += (size_t)n;
  }
  lamp_idx idx;
  if (lamp_idx_read(path, &idx) == LAMP_OK) lamp_idx_free(&idx);
  return 0;
}
