/* Entry returned NULL via set_error(NULL, ...): "<path>: ... returned NULL: refusing: ...". */
#include "lamp/plugin.h"

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  host->set_error(NULL, LAMP_ERR_UNSUPPORTED, "refusing: core %s is not the one I need", "(any)");
  return NULL;
}
