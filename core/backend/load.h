/*
** Loading device backends built as modules (module.h): the registry (registry.c) asks here for a
** device whose slot is empty. Each module is tried once per process; its outcome, the table or the
** reason, is kept.
*/
#ifndef LAMP_BACKEND_LOAD_H
#define LAMP_BACKEND_LOAD_H

#include "backend/backend_impl.h"

/* 1 when `device`'s backend is a module (cuda), 0 when it is built in or there is none. */
int lamp_backend_is_module(lamp_device device);

/*
** Loads and registers `device`'s module on the first call; LAMP_OK once registered. A failure is
** kept: this and every later call return it with the same message, which starts "device <name>: ".
** Not for devices without a module (LAMP_ERR_INTERNAL).
*/
lamp_status lamp_backend_load(lamp_device device);

/* The file the module was loaded from ("" before it was, or when it could not be). */
const char *lamp_backend_module_path(lamp_device device);

#endif
