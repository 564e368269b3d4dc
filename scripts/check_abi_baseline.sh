#!/usr/bin/env bash
# Usage: check_abi_baseline.sh LIBRARY LAYOUT_PROGRAM [--update]
#
# The C ABI is a promise to three languages: it may grow, never change.
# Compares the exported symbols of LIBRARY and the struct layouts and enum
# values printed by LAYOUT_PROGRAM with abi/baseline/{symbols,layout}.txt:
# a line of the baseline that is missing or different now is a break (exit 1);
# new lines are additions (reported, allowed). A struct that grew
# (sizeof larger, every old offset unchanged) is an addition too: option
# structs are append-only and the library accepts every published size. --update rewrites the baseline,
# to be committed deliberately with an ABI addition.
set -euo pipefail

lib="${1:?usage: check_abi_baseline.sh LIBRARY LAYOUT_PROGRAM [--update]}"
layout_prog="${2:?usage: check_abi_baseline.sh LIBRARY LAYOUT_PROGRAM [--update]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="$root/abi/baseline"

now_symbols="$(nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 == "T" { print $3 }' | sort -u)"
now_layout="$("$layout_prog" | sort)"

if [ "${3:-}" = "--update" ]; then
  mkdir -p "$base"
  printf '%s\n' "$now_symbols" > "$base/symbols.txt"
  printf '%s\n' "$now_layout" > "$base/layout.txt"
  echo "check_abi_baseline: baseline rewritten in abi/baseline/"
  exit 0
fi

status=0
for kind in symbols layout; do
  now="$([ $kind = symbols ] && printf '%s\n' "$now_symbols" || printf '%s\n' "$now_layout")"
  [ -f "$base/$kind.txt" ] || { echo "check_abi_baseline: abi/baseline/$kind.txt is missing" >&2; exit 1; }
  removed="$(comm -23 <(sort "$base/$kind.txt") <(printf '%s\n' "$now" | sort))"
  added="$(comm -13 <(sort "$base/$kind.txt") <(printf '%s\n' "$now" | sort))"
  if [ "$kind" = layout ] && [ -n "$removed" ]; then
    # sizeof(T) old -> sizeof(T) new with new > old: growth, not a break.
    removed="$(printf '%s\n' "$removed" | while read -r name value; do
      case "$name" in
        sizeof\(*)
          grown="$(printf '%s\n' "$now" | awk -v n="$name" -v v="$value" '$1 == n && $2 + 0 > v + 0 { print $2 }')"
          [ -n "$grown" ] && continue ;;
      esac
      printf '%s %s\n' "$name" "$value"
    done)"
  fi
  if [ -n "$removed" ]; then
    echo "check_abi_baseline: ABI break in $kind: these baseline lines are gone or changed:" >&2
    printf '  %s\n' "$removed" >&2
    [ -z "$added" ] || { echo "  (now:)" >&2; printf '  %s\n' "$added" >&2; }
    status=1
  elif [ -n "$added" ]; then
    echo "check_abi_baseline: additive $kind changes (allowed; update the baseline when releasing):"
    printf '  %s\n' "$added"
  fi
done
[ "$status" -ne 0 ] || echo "check_abi_baseline: no break against abi/baseline ($(printf '%s\n' "$now_symbols" | wc -l) symbols)"
exit "$status"
