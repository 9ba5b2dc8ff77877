/*
** Where an installed lamp keeps its own files. `cmake --install` puts the executable in
** <prefix>/bin and the plugins and backend modules in <prefix>/lib/lamp/{plugins,backends}; the
** tree is found from the running executable (/proc/self/exe) rather than from a path fixed at
** build time, so a prefix that is moved or copied elsewhere keeps working. A lamp run from its
** build folder has no such tree and keeps the build's folders (build/plugins, build/backends).
*/
#ifndef LAMP_BASE_INSTALL_TREE_H
#define LAMP_BASE_INSTALL_TREE_H

#include <stddef.h>

/* <folder of the running executable>/LAMP_INSTALL_TREE_FROM_BIN ("../lib/lamp"), without
   symbolic links, when that folder exists; NULL otherwise (a build folder, a copied executable,
   no /proc). Found once per process. */
const char *lamp_install_tree(void);

/* The folder of the running executable, without symbolic links, into out; 0 when /proc/self/exe
   cannot be read or the path does not fit. */
int lamp_executable_dir(char *out, size_t size);

#endif
