# Cross-compiling modpack's C runtime (and programs using it) for 64-bit Arm Linux with
# Debian's cross toolchain (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross), and
# running the results under qemu-user (apt-get install qemu-user):
#
#   cmake -S . -B build-arm64 --toolchain cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm64 -j && ctest --test-dir build-arm64
#
# Libraries for that machine are exported with export_library(..., target="aarch64-linux-gnu").
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Headers and libraries from the target's sysroot only; programs (the build tools) from here.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest (and add_custom_command) run target programs through the emulator.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
