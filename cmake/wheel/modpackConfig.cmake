# modpack's C runtime as a modpack wheel ships it (pip install modpack): the same targets as the
# package CMake installs (CMakeLists.txt), over the files of the installed Python package, which
# is laid out as an install prefix (include/, lib/). Find it with
#
#   cmake -Dmodpack_DIR="$(modpack --cmake-dir)" ...      # or python -m modpack --cmake-dir
#
# then find_package(modpack) and link modpack::runtime (shared) or modpack::runtime_static.
# Written for the wheel by setup.py (build_ext); relocatable: every path is found from here.
get_filename_component(_modpack_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)

if(NOT TARGET modpack::runtime)
  add_library(modpack::runtime SHARED IMPORTED)
  set_target_properties(modpack::runtime PROPERTIES
    IMPORTED_LOCATION "${_modpack_prefix}/lib/libmodpack_runtime.so"
    IMPORTED_SONAME "libmodpack_runtime.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_modpack_prefix}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
endif()
if(NOT TARGET modpack::runtime_static)
  add_library(modpack::runtime_static STATIC IMPORTED)
  set_target_properties(modpack::runtime_static PROPERTIES
    IMPORTED_LOCATION "${_modpack_prefix}/lib/libmodpack_runtime.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_modpack_prefix}/include"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
endif()

set(modpack_INCLUDE_DIR "${_modpack_prefix}/include")
set(modpack_LIBRARY_DIR "${_modpack_prefix}/lib")
unset(_modpack_prefix)
