/*
** The exit status a script run reports to scripts/lamp-run (LAMP_RUN_STATUS_DIR set): the file
** <dir>/<rank> holding the status, which the launcher reads to tell a finished rank from a killed
** one. The rank's shell writes it too, after lamp exits; but once every rank has finalized MPI,
** Open MPI may end that shell before it writes (about one two-rank run in twenty did), and the
** launcher then reported a finished run as killed ranks. So lamp writes it itself as soon as the
** script has ended, before closing its plugins (and MPI with them), to a temporary name renamed
** into place, so the launcher never reads half a number.
*/
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "cli/commands.h"

void lamp_cli_report_status(int status) {
  const char *dir = getenv("LAMP_RUN_STATUS_DIR");
  if (dir == NULL || dir[0] == '\0') return;
  int rank = lamp_log_get_rank();
  char path[4096], tmp[4096 + 16];
  if (snprintf(path, sizeof path, "%s/%d", dir, rank) >= (int)sizeof path) return;
  snprintf(tmp, sizeof tmp, "%s.lamp-tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return; /* the shell's own write remains */
  int ok = fprintf(f, "%d\n", status) > 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) remove(tmp);
}
