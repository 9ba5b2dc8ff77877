/*
** A backend module that needs a library the machine lacks: it calls into a stub built with the
** soname liblamp_absent.so.1 (absent_stub.c) under another file name, so dlopen finds no file by
** that name, as it would find no libcublas.so.13 on a machine without the CUDA libraries.
*/
#include "backend/module.h"

int lamp_absent_function(void);

__attribute__((visibility("default"))) lamp_status lamp_backend_module_open(const lamp_backend_services *s,
                                                                            const lamp_backend **out) {
  (void)s;
  (void)out;
  return lamp_absent_function() == 0 ? LAMP_OK : LAMP_ERR_INTERNAL;
}
