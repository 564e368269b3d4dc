#!/usr/bin/env bash
# An installed kvcache is relocatable and versioned: install the build to a prefix, install a program linked to
# it into the same prefix, move the prefix, then
#   - that program still runs ($ORIGIN/../lib), and the library looks for GPU plugins in its new directory;
#   - find_package(kvcache 0.6) finds the moved prefix and its program runs; a newer minor or major is refused;
#   - pkg-config (shared, and --static for a fully static program) builds a program that runs;
#   - the library's SONAME is libkvcache.so.MAJOR and nothing installed names the old prefix.
#   tests/consumer/check_relocated_install.sh BUILD_DIR WORK_DIR
set -euo pipefail
build="$(cd "${1:?usage: check_relocated_install.sh BUILD_DIR WORK_DIR}" && pwd)"
work="${2:?usage: check_relocated_install.sh BUILD_DIR WORK_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail() { echo "check_relocated_install: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
first="$work/first-prefix"
moved="$work/elsewhere/moved-prefix"
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")"
major="${version%%.*}"
minor="${version#*.}"; minor="${minor%%.*}"

cmake --install "$build" --prefix "$first" >"$work/install.log"
# Programs are installed into the prefix the way users install theirs (rpath $ORIGIN/../lib).
cmake -G Ninja -S "$here" -B "$work/before-move" -DKVC_CONSUMER_MODE=package -DCMAKE_PREFIX_PATH="$first" \
  -DCMAKE_INSTALL_PREFIX="$first" >"$work/configure-before.log"
cmake --build "$work/before-move" --target install >"$work/build-before.log"

lib="$(find "$first" -name "libkvcache.so.$version" | head -n 1)"
[ -n "$lib" ] || fail "no libkvcache.so.$version under $first"
libdir_rel="${lib#"$first"/}"; libdir_rel="${libdir_rel%/*}"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[ "$soname" = "libkvcache.so.$major" ] || fail "SONAME is '$soname', not libkvcache.so.$major"
[ -L "$first/$libdir_rel/libkvcache.so.$major" ] && [ -L "$first/$libdir_rel/libkvcache.so" ] ||
  fail "libkvcache.so and libkvcache.so.$major are not links to libkvcache.so.$version"
if grep -rlF "$first" "$first" --exclude='*.a' >"$work/absolute.txt"; then
  fail "installed files name the prefix they were installed to: $(tr '\n' ' ' <"$work/absolute.txt")"
fi
echo "installed: $libdir_rel/libkvcache.so.$version (SONAME $soname); no file names the prefix"

mkdir -p "$(dirname "$moved")"
mv "$first" "$moved"
[ ! -e "$first" ] || fail "$first is still there"

# 1. The program installed before the move, and the plugin directory (the library's own).
out="$(LD_DEBUG=files "$moved/bin/consumer_app" 2>&1)" || { echo "$out" | grep -v '^ *[0-9]*:' >&2; fail "the installed program does not run after the move"; }
echo "$out" | grep -q "^kvcache $version$" || fail "the installed program did not report $version"
# The library's directory as the loader spelled it (bin/../lib from the program's rpath) is the moved one.
looked=""
for tried in $(echo "$out" | grep -oE "[^ ,=]*/libkvcache-cuda\.so" | sort -u); do
  [ "$(cd "$(dirname "$tried")" 2>/dev/null && pwd -P)" = "$(cd "$moved/$libdir_rel" && pwd -P)" ] && looked="$tried"
done
[ -n "$looked" ] ||
  fail "the moved library did not look for its GPU plugin in $moved/$libdir_rel: $(echo "$out" | grep '^cuda:')"
echo "moved prefix: bin/consumer_app runs; the plugin is looked for in the moved lib directory"

# 2. find_package against the moved prefix, with the version file's answer for other versions.
cmake -G Ninja -S "$here" -B "$work/find-package" -DKVC_CONSUMER_MODE=package -DCMAKE_PREFIX_PATH="$moved" \
  >"$work/configure-package.log"
cmake --build "$work/find-package" >"$work/build-package.log"
"$work/find-package/consumer_app" | grep -q "^one update: 1 keys$" || fail "the find_package program failed"
for newer in "$major.$((minor + 1))" "$((major + 1)).0"; do
  if cmake -S "$here" -B "$work/find-$newer" -DKVC_CONSUMER_MODE=package -DKVC_CONSUMER_NEEDS="$newer" \
      -DCMAKE_PREFIX_PATH="$moved" >"$work/configure-$newer.log" 2>&1; then
    fail "find_package(kvcache $newer) accepted version $version"
  fi
  grep -q "considered but not accepted" "$work/configure-$newer.log" || fail "find_package($newer) failed for another reason"
done
echo "find_package: kvcache 0.6 found in the moved prefix, $major.$((minor + 1)) and $((major + 1)).0 refused"

# 3. pkg-config from the moved prefix: shared, then fully static with what --static adds.
export PKG_CONFIG_PATH="$moved/$libdir_rel/pkgconfig"
[ "$(pkg-config --modversion kvcache)" = "$version" ] || fail "pkg-config --modversion is not $version"
cc=${CC:-cc}
# shellcheck disable=SC2046
$cc "$here/app.c" -o "$work/app-pkg-config" $(pkg-config --cflags --libs kvcache) \
  -Wl,-rpath,"$(pkg-config --variable=libdir kvcache)"
"$work/app-pkg-config" | grep -q "^one update: 1 keys$" || fail "the pkg-config program failed"
static_libs="$(pkg-config --static --libs kvcache)"
# shellcheck disable=SC2046
if ! $cc "$here/app.c" -o "$work/app-static" $(pkg-config --cflags kvcache) $static_libs -static \
    2>"$work/static.log"; then
  cat "$work/static.log" >&2
  fail "a static program does not link with pkg-config --static --libs kvcache ($static_libs)"
fi
readelf -d "$work/app-static" | grep -q NEEDED && fail "the static program still needs shared libraries"
"$work/app-static" | grep -q "^one update: 1 keys$" || fail "the static program failed"
echo "pkg-config: shared and static ($static_libs -static) programs run"
