#!/usr/bin/env bash
# Packaging CI for deeprnn: builds and runs a consumer by every route a user
# can take (docs/PACKAGING.md), each warning-free with -Wall -Wextra -Werror.
#   a. git submodule: test/consumers/subdirectory does add_subdirectory (C++20)
#      and fails to configure if deeprnn defines more than its library or
#      changes the parent's flags; then checks no deeprnn test binary was built
#   b. cmake --install into a temporary prefix, then test/consumers/find_package
#      (C++ and C consumers, package version checks)
#   c. pkg-config against that prefix
#   d. make install PREFIX=... (and DESTDIR staging), then compile against it
#   e. the C API test (test/test_capi.c) as C11 with GCC and Clang, against the
#      installed header and library
#   f. the Python ctypes sample against a shared library built with the
#      documented one-liner, with numpy and with numpy hidden (same output)
# Usage, from anywhere: bash .ci/consumers.sh   (runs tools/install-deps first)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export DEBIAN_FRONTEND=noninteractive
stage() { printf '\n=== consumers: %s ===\n' "$*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jobs=-j2
strict="-Wall -Wextra -Werror"

tools/install-deps sanitizers   # clang for stage e

# Each route's build compiles deeprnn.cpp, one translation unit and one core's
# work, so the builds go two at a time (a with b, d with f): on a 2-core Zen 3
# VM this stage took 7-8 minutes with the four builds in a row.
# in_parallel F G: runs the shell functions F and G at once, each into its own
# log; a failure prints that log and stops the script.
in_parallel() {
    local f pids=() failed=0
    for f in "$@"; do (set -e; "$f") >"$tmp/$f.log" 2>&1 & pids+=($!); done
    for f in "$@"; do
        if ! wait "${pids[0]}"; then cat "$tmp/$f.log"; echo "consumers: $f failed" >&2; failed=1; fi
        pids=("${pids[@]:1}")
    done
    return $failed
}
build_subdirectory() {
    cmake -S test/consumers/subdirectory -B "$tmp/sub" -DDEEPRNN_DIR="$repo" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$tmp/sub"
}
build_and_install_with_cmake() {
    cmake -S . -B "$tmp/build" -DDEEPRNN_BUILD_TESTS=OFF -DDEEPRNN_BUILD_SAMPLES=OFF -DDEEPRNN_BUILD_BENCH=OFF \
          -DDEEPRNN_CUDA=OFF -DDEEPRNN_WERROR=ON -DCMAKE_INSTALL_PREFIX="$tmp/prefix" >/dev/null
    cmake --build "$tmp/build"
    cmake --install "$tmp/build" >/dev/null
}
install_with_make() {
    make --no-print-directory install BUILD="$tmp/make-build" PREFIX="$tmp/mk" WERROR=1 OPT=-O2 >/dev/null
}
build_shared_library() {   # the documented one-liner for FFI (samples/python/)
    g++ -std=c++17 -O2 $strict -shared -fPIC deeprnn.cpp -o "$tmp/libdeeprnn.so" -lopenblas -lboost_thread
}
stage "building a (add_subdirectory) and b (cmake --install)"
in_parallel build_subdirectory build_and_install_with_cmake

stage "a. add_subdirectory (git submodule)"
if find "$tmp/sub" -name 'deeprnn_tests' -o -name 'deeprnn_test_capi' -o -name 'quickstart' | grep -q .; then
    echo "add_subdirectory built deeprnn's tests or samples" >&2
    exit 1
fi
"$tmp/sub/consumer"

stage "b. cmake --install + find_package"
for f in include/deeprnn.hpp include/deeprnn_c.h lib/libdeeprnn.a lib/cmake/deeprnn/deeprnnConfig.cmake \
         lib/cmake/deeprnn/deeprnnConfigVersion.cmake lib/cmake/deeprnn/deeprnnTargets.cmake lib/pkgconfig/deeprnn.pc; do
    test -f "$tmp/prefix/$f" || { echo "cmake --install did not write $f" >&2; exit 1; }
done
cmake -S test/consumers/find_package -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/fp" $jobs
"$tmp/fp/consumer"
"$tmp/fp/consumer_c"

stage "c. pkg-config (CMake-installed .pc)"
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --exists --print-errors "deeprnn = $(sed -n 's/^#define DEEPRNN_VERSION_STRING "\(.*\)"/\1/p' deeprnn.hpp)"
g++ -std=c++17 -O2 $strict -DROUTE='"pkg-config"' test/consumers/consumer.cpp -o "$tmp/pc_consumer" \
    $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs deeprnn)
"$tmp/pc_consumer"

stage "building d (make install) and f (the shared library)"
in_parallel install_with_make build_shared_library

stage "d. make install PREFIX=... and DESTDIR staging"
g++ -std=c++17 -O2 $strict -DROUTE='"make install"' -I"$tmp/mk/include" test/consumers/consumer.cpp \
    -o "$tmp/mk_consumer" -L"$tmp/mk/lib" -ldeeprnn -lopenblas -lboost_thread -lpthread
"$tmp/mk_consumer"
g++ -std=c++17 -O2 $strict -DROUTE='"make install + pkg-config"' test/consumers/consumer.cpp -o "$tmp/mk_pc_consumer" \
    $(PKG_CONFIG_PATH="$tmp/mk/lib/pkgconfig" pkg-config --cflags --libs deeprnn)
"$tmp/mk_pc_consumer"
make --no-print-directory install BUILD="$tmp/make-build" PREFIX=/opt/deeprnn DESTDIR="$tmp/stage" WERROR=1 OPT=-O2 >/dev/null
test -f "$tmp/stage/opt/deeprnn/include/deeprnn_c.h" -a -f "$tmp/stage/opt/deeprnn/lib/libdeeprnn.a"
grep -qx 'prefix=/opt/deeprnn' "$tmp/stage/opt/deeprnn/lib/pkgconfig/deeprnn.pc"   # not the staging dir
echo "DESTDIR staging OK"

stage "e. C API test, compiled as C11 (GCC and Clang), installed header and library"
for cc in gcc clang; do
    $cc -std=c11 -pedantic -O2 $strict -I"$tmp/prefix/include" -c test/test_capi.c -o "$tmp/test_capi_$cc.o"
    g++ "$tmp/test_capi_$cc.o" -L"$tmp/prefix/lib" -ldeeprnn -lopenblas -lboost_thread -lpthread -o "$tmp/test_capi_$cc"
    "$tmp/test_capi_$cc" test/data
done

stage "f. Python ctypes sample"
/usr/bin/python3 samples/python/run_model.py "$tmp/libdeeprnn.so" samples/quickstart/model samples/quickstart/input.npy
with_numpy=$(/usr/bin/python3 samples/python/run_model.py "$tmp/libdeeprnn.so")
mkdir -p "$tmp/no-numpy" && echo 'raise ImportError("hidden by .ci/consumers.sh")' > "$tmp/no-numpy/numpy.py"
plain=$(PYTHONPATH="$tmp/no-numpy" /usr/bin/python3 samples/python/run_model.py "$tmp/libdeeprnn.so")
echo "$plain"
if [ "$with_numpy" != "$plain" ]; then
    printf 'numpy and plain ctypes runs differ:\n%s\n%s\n' "$with_numpy" "$plain" >&2
    exit 1
fi

stage "all consumers passed"
