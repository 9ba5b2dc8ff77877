/* No entry symbol: "<path>: no lamp_plugin_entry_v1 symbol: not a lamp plugin". */
#include "lamp/plugin.h"

LAMP_PLUGIN_EXPORT int lamp_plugin_entry(void) { return 42; }
