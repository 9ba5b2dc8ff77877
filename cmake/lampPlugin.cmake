# lamp_add_plugin(<target> <source>...): a lamp plugin, <target>.so, built as the core's own are:
# a MODULE library (never linked into anything, opened with dlopen) without the "lib" prefix, in
# ISO C11, exporting only what LAMP_PLUGIN_EXPORT marks (hidden visibility), every symbol resolved
# at link time (-Wl,--no-undefined, so a missing one fails the build instead of the load), against
# lamp::plugin's headers. Link what the plugin itself needs as usual:
#   target_link_libraries(<target> PRIVATE m)
# Part of the lamp package (find_package(lamp)); needs lamp::plugin.
function(lamp_add_plugin target)
  if(ARGC LESS 2)
    message(FATAL_ERROR "lamp_add_plugin(${target}): no sources; usage: lamp_add_plugin(<target> <source>...)")
  endif()
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE lamp::plugin)
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()
