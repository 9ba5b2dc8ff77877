#include "base/install_tree.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set by the build from its install layout (bin -> lib/lamp); the default is that layout. */
#ifndef LAMP_INSTALL_TREE_FROM_BIN
#define LAMP_INSTALL_TREE_FROM_BIN "../lib/lamp"
#endif

int lamp_executable_dir(char *out, size_t size) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || size == 0) return 0;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL) return 0;
  if (slash == exe) slash[1] = '\0'; /* an executable in "/" */
  else *slash = '\0';
  return (size_t)snprintf(out, size, "%s", exe) < size;
}

static char tree[PATH_MAX];
static pthread_once_t tree_once = PTHREAD_ONCE_INIT;

static void find_tree(void) {
  char dir[PATH_MAX], candidate[PATH_MAX + sizeof LAMP_INSTALL_TREE_FROM_BIN + 1];
  struct stat st;
  if (!lamp_executable_dir(dir, sizeof dir)) return;
  snprintf(candidate, sizeof candidate, "%s/%s", dir, LAMP_INSTALL_TREE_FROM_BIN);
  if (stat(candidate, &st) != 0 || !S_ISDIR(st.st_mode)) return;
  if (realpath(candidate, tree) == NULL) tree[0] = '\0';
}

const char *lamp_install_tree(void) {
  pthread_once(&tree_once, find_tree);
  return tree[0] != '\0' ? tree : NULL;
}
