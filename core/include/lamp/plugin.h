/* Everything a plugin author includes: the ABI v1 common header, the host API, the families. */
#ifndef LAMP_PLUGIN_H
#define LAMP_PLUGIN_H

#include "lamp/abi.h"
#include "lamp/host.h"
#include "lamp/precision.h"
#include "lamp/comm.h"
#include "lamp/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host);

#ifdef __cplusplus
}
#endif
#endif
