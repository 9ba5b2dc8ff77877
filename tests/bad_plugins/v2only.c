/* No v1 entry, a _v2 one: "<path>: built for a newer core: exports lamp_plugin_entry_v2, ...". */
#include "lamp/plugin.h"

LAMP_PLUGIN_EXPORT const void *lamp_plugin_entry_v2(const void *host);

LAMP_PLUGIN_EXPORT const void *lamp_plugin_entry_v2(const void *host) {
  (void)host;
  return 0;
}
