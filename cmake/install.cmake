# `cmake --install build --prefix P`: what a user and a plugin author get, relocatable as a whole
# (move or copy P anywhere and it still works):
#   P/bin/lamp, P/bin/lamp-run                the executable and the multi-rank launcher
#   P/lib/lamp/plugins/<kind>/<name>.so       the built-in plugins (the layout of build/plugins)
#   P/lib/lamp/backends/cuda.so               the CUDA backend module, where it was built
#   P/include/lamp/*.h                        the public plugin ABI
#   P/share/lamp/*.lua, P/share/lamp/lib/     the training scripts and their library
#   P/lib/pkgconfig/lamp-plugin.pc            cflags and libs for building a plugin
#   P/lib/cmake/lamp/                         find_package(lamp): lamp::plugin, lamp_add_plugin()
# The installed lamp finds its plugins and modules from its own location (core/base/install_tree.h:
# <bin>/../lib/lamp); a lamp in its build folder keeps using build/plugins and build/backends.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

foreach(dir BINDIR LIBDIR INCLUDEDIR DATADIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    message(FATAL_ERROR "CMAKE_INSTALL_${dir} is absolute (${CMAKE_INSTALL_${dir}}): lamp's install is "
                        "relocatable and needs it relative to the prefix")
  endif()
endforeach()
set(LAMP_INSTALL_TREE ${CMAKE_INSTALL_LIBDIR}/lamp)           # lib/lamp
set(LAMP_INSTALL_PLUGINDIR ${LAMP_INSTALL_TREE}/plugins)
set(LAMP_INSTALL_BACKENDDIR ${LAMP_INSTALL_TREE}/backends)
set(LAMP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lamp)
set(LAMP_INSTALL_SCRIPTDIR ${CMAKE_INSTALL_DATADIR}/lamp)

# The tree as the executable sees it ("../lib/lamp"): compiled into the core.
file(RELATIVE_PATH lamp_tree_from_bin /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${LAMP_INSTALL_TREE})
target_compile_definitions(lampcore PRIVATE LAMP_INSTALL_TREE_FROM_BIN="${lamp_tree_from_bin}")

# The plugin ABI version, from the header, for the package files.
file(STRINGS ${CMAKE_SOURCE_DIR}/core/include/lamp/abi.h lamp_abi_lines REGEX "^#define LAMP_ABI_M(AJ|IN)OR ")
string(REGEX REPLACE ".*LAMP_ABI_MAJOR ([0-9]+).*" "\\1" lamp_abi_major "${lamp_abi_lines}")
string(REGEX REPLACE ".*LAMP_ABI_MINOR ([0-9]+).*" "\\1" lamp_abi_minor "${lamp_abi_lines}")
set(LAMP_ABI_VERSION ${lamp_abi_major}.${lamp_abi_minor})

# ---- the executable, the plugins, the backend module ------------------------------------------
install(TARGETS lamp RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${CMAKE_SOURCE_DIR}/scripts/lamp-run DESTINATION ${CMAKE_INSTALL_BINDIR})

get_property(lamp_plugin_targets GLOBAL PROPERTY LAMP_PLUGIN_TARGETS)
foreach(target ${lamp_plugin_targets})
  get_target_property(kind ${target} LAMP_PLUGIN_KIND)
  install(TARGETS ${target} LIBRARY DESTINATION ${LAMP_INSTALL_PLUGINDIR}/${kind})
endforeach()

if(TARGET lamp_cuda_backend)
  install(TARGETS lamp_cuda_backend LIBRARY DESTINATION ${LAMP_INSTALL_BACKENDDIR})
endif()

# ---- headers and scripts ----------------------------------------------------------------------
install(DIRECTORY ${CMAKE_SOURCE_DIR}/core/include/lamp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
file(GLOB lamp_scripts CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/scripts/*.lua)
install(FILES ${lamp_scripts} DESTINATION ${LAMP_INSTALL_SCRIPTDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/scripts/lib/ DESTINATION ${LAMP_INSTALL_SCRIPTDIR}/lib
        FILES_MATCHING PATTERN "*.lua")

# ---- pkg-config: lamp-plugin.pc, its prefix relative to where it lies ---------------------------
file(RELATIVE_PATH LAMP_PC_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" LAMP_PC_PREFIX "${LAMP_PC_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/lamp-plugin.pc.in ${CMAKE_BINARY_DIR}/package/lamp-plugin.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/lamp-plugin.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- CMake package: find_package(lamp) ---------------------------------------------------------
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/lampConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/lampConfig.cmake
  INSTALL_DESTINATION ${LAMP_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR LAMP_INSTALL_PLUGINDIR LAMP_INSTALL_SCRIPTDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/lampConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/lampConfig.cmake ${CMAKE_BINARY_DIR}/package/lampConfigVersion.cmake
        ${CMAKE_CURRENT_LIST_DIR}/lampPlugin.cmake
        DESTINATION ${LAMP_INSTALL_CMAKEDIR})
