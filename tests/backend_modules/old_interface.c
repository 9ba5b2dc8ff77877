/*
** A backend module built against an older backend interface: its entry runs the same check as
** every module's (lamp_backend_services_check) with the version it was built for, one below the
** core's, and so refuses the core's services with both versions named.
*/
#include "backend/module.h"

__attribute__((visibility("default"))) lamp_status lamp_backend_module_open(const lamp_backend_services *s,
                                                                            const lamp_backend **out) {
  (void)out;
  return lamp_backend_services_check(s, "cuda", LAMP_BACKEND_MODULE_VERSION - 1, sizeof(lamp_backend));
}
