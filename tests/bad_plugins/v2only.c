/* Built for a future core: only lamp_plugin_entry_v2 exists ("built for a newer core"). */
#include "lamp/plugin.h"

LAMP_PLUGIN_EXPORT const void *lamp_plugin_entry_v2(const void *host);

LAMP_PLUGIN_EXPORT const void *lamp_plugin_entry_v2(const void *host) {
  (void)host;
  return 0;
}
