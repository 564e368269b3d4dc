#!/usr/bin/env bash
# Usage: check_needed.sh LIBRARY [--exports SYMBOL...] [--none-of NAME...]
#
# Checks a shared library's dynamic section:
#   --exports SYMBOL...  its defined dynamic symbols are exactly these
#   --none-of NAME...    no NEEDED entry is NAME.so or NAME.so.<version>
#                        (e.g. libcudart, libamdhip64)
# Prints what it read; exits 1 with each violation named.
set -euo pipefail

lib="${1:?usage: check_needed.sh LIBRARY [--exports SYMBOL...] [--none-of NAME...]}"
shift
[ -f "$lib" ] || { echo "check_needed: no such file: $lib" >&2; exit 1; }

exports=()
forbidden=()
mode=""
for arg in "$@"; do
  case "$arg" in
    --exports | --none-of) mode="$arg" ;;
    *)
      case "$mode" in
        --exports) exports+=("$arg") ;;
        --none-of) forbidden+=("$arg") ;;
        *) echo "check_needed: '$arg' comes before --exports or --none-of" >&2; exit 2 ;;
      esac
      ;;
  esac
done

status=0
needed="$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')"
echo "check_needed: $lib NEEDED: $(printf '%s ' $needed)"
for name in "${forbidden[@]}"; do
  for entry in $needed; do
    case "$entry" in
      "$name.so" | "$name.so."*)
        echo "check_needed: $lib needs $entry, which it must not (no $name)" >&2
        status=1
        ;;
    esac
  done
done

if [ "${#exports[@]}" -gt 0 ]; then
  have="$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u)"
  want="$(printf '%s\n' "${exports[@]}" | sort -u)"
  echo "check_needed: $lib exports: $(printf '%s ' $have)"
  if [ "$have" != "$want" ]; then
    echo "check_needed: $lib must export exactly: $(printf '%s ' $want)" >&2
    status=1
  fi
fi
exit "$status"
