#!/usr/bin/env bash
# Builds and runs the Go example of the README in a new module outside the
# repository that requires the package with a replace to this checkout, as a
# user's project would. Expects the environment of env.sh (PKG_CONFIG_PATH,
# CGO_LDFLAGS) or an installed kvcache.
#   bindings/go/scripts/example-module.sh [README ...]
# The example is the first ```go block of each README given (default: the
# repository's README.md if it has one, and bindings/go/README.md).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
readmes=("$@")
if [ ${#readmes[@]} -eq 0 ]; then
  grep -q '^```go' "$root/README.md" 2>/dev/null && readmes+=("$root/README.md")
  readmes+=("$here/README.md")
fi
module="$(sed -n 's/^module //p' "$here/go.mod")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

for readme in "${readmes[@]}"; do
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  awk '/^```go$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$readme" >"$tmp/main.go"
  if [ ! -s "$tmp/main.go" ]; then
    echo "example-module: no \`\`\`go block in $readme" >&2
    exit 1
  fi
  (
    cd "$tmp"
    go mod init example.com/kvcache-example >/dev/null 2>&1
    go mod edit -require="$module@v0.0.0" -replace="$module=$here"
    go build -o example .
    echo "-- $readme: the example's output:"
    ./example
  )
  rm -rf "$tmp"
  trap - EXIT
done
