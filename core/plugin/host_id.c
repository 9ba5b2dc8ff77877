/*
** Which ranks share a host: each rank's identity is its host name and the kernel's boot id, so
** two machines that happen to share a name (cloned images, containers named alike) still count
** as two, and ranks in containers on one machine count as one host only when their names agree
** too. The bootstrap all-gathers these and numbers the ranks of each host in rank order: the
** local rank that chooses a GPU.
*/
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "plugin/bootstrap.h"

/* The boot id without its newline; "" where /proc does not give one. */
static void boot_id(char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL) return;
  if (fgets(out, (int)size, f) == NULL) out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

void lamp_host_identity(char id[LAMP_HOST_ID_BYTES]) {
  char name[80] = "", boot[48];
  if (gethostname(name, sizeof name - 1) != 0) snprintf(name, sizeof name, "?");
  name[sizeof name - 1] = '\0';
  boot_id(boot, sizeof boot);
  memset(id, 0, LAMP_HOST_ID_BYTES);
  snprintf(id, LAMP_HOST_ID_BYTES, "%s/%s", name, boot);
}

void lamp_host_local_rank(const char *ids, int size, int rank, int *local_rank, int *local_size) {
  const char *mine = ids + (size_t)rank * LAMP_HOST_ID_BYTES;
  *local_rank = *local_size = 0;
  for (int r = 0; r < size; r++) {
    if (memcmp(ids + (size_t)r * LAMP_HOST_ID_BYTES, mine, LAMP_HOST_ID_BYTES) != 0) continue;
    if (r < rank) ++*local_rank;
    ++*local_size;
  }
}
