/* dlopen error (RTLD_NOW): "cannot load plugin <path>: undefined symbol: lamp_function_...". */
#include "lamp/plugin.h"

extern int lamp_function_nobody_defines(void);

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  lamp_function_nobody_defines();
  return NULL;
}
