/* Exports a function, but not lamp_plugin_entry_v1: "no lamp_plugin_entry_v1 symbol". */
#include "lamp/plugin.h"

LAMP_PLUGIN_EXPORT int lamp_plugin_entry(void) { return 42; }
