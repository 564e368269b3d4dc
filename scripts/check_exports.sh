#!/usr/bin/env bash
# Usage: check_exports.sh LIBRARY [SONAME]
#
# Checks that the shared library LIBRARY exports only kvc_* symbols (and some)
# and that its SONAME is SONAME, by default libkvcache.so.<KVC_VERSION_MAJOR>
# read from abi/include/kvcache/version.h. Exits 1 with the offenders listed.
set -euo pipefail

lib="${1:?usage: check_exports.sh LIBRARY [SONAME]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -f "$lib" ] || { echo "check_exports: no such file: $lib" >&2; exit 1; }

if [ $# -ge 2 ]; then
  want_soname="$2"
else
  major="$(sed -n 's/^#define KVC_VERSION_MAJOR \{1,\}\([0-9]\{1,\}\).*/\1/p' \
    "$root/abi/include/kvcache/version.h")"
  [ -n "$major" ] || { echo "check_exports: KVC_VERSION_MAJOR not found" >&2; exit 1; }
  want_soname="libkvcache.so.$major"
fi

status=0

# Third column of `nm -D --defined-only`: the symbol name (version suffixes
# such as @@VERS would be part of it and are not expected).
symbols="$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u)"
count="$(printf '%s\n' "$symbols" | grep -c . || true)"
if [ "$count" -eq 0 ]; then
  echo "check_exports: $lib exports no symbols at all" >&2
  status=1
fi
foreign="$(printf '%s\n' "$symbols" | grep -v '^kvc_' | grep . || true)"
if [ -n "$foreign" ]; then
  echo "check_exports: $lib exports symbols outside the kvc_ prefix:" >&2
  printf '  %s\n' $foreign >&2
  status=1
fi

soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
if [ "$soname" != "$want_soname" ]; then
  echo "check_exports: SONAME of $lib is '${soname:-none}', expected '$want_soname'" >&2
  status=1
fi

# Every function the headers declare must be exported (a declared but
# unimplemented entry point would only fail when a binding links it).
declared="$(cat "$root"/abi/include/kvcache.h "$root"/abi/include/kvcache/*.h | tr '\n' ' ' |
  grep -o 'KVC_API [^;(]*kvc_[a-z0-9_]*(' | sed 's/($//; s/.*[ *]\(kvc_[a-z0-9_]*\)$/\1/' | sort -u)"
missing="$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$symbols"))"
if [ -n "$missing" ]; then
  echo "check_exports: declared in abi/include but not exported by $lib:" >&2
  printf '  %s\n' $missing >&2
  status=1
fi

if [ "$status" -eq 0 ]; then
  echo "check_exports: $count kvc_* symbols exported (every declared function), SONAME $soname"
fi
exit "$status"
