#!/usr/bin/env bash
# Fails unless ci/rocm/Dockerfile installs exactly the Go version of go.mod's
# `go` directive: its `ARG GO_VERSION=` must equal that version, and its Go
# must come from `FROM golang:${GO_VERSION}`. Run by .ci/run.
#
# Usage: check_go_version.sh [GO_MOD [DOCKERFILE]]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
gomod=${1:-$root/go.mod}
dockerfile=${2:-$root/ci/rocm/Dockerfile}

want=$(awk '$1 == "go" && NF == 2 { print $2; exit }' "$gomod")
have=$(sed -n 's/^ARG[[:space:]]\{1,\}GO_VERSION=\([^[:space:]]*\).*/\1/p' "$dockerfile" | head -n 1)

if [[ -z $want ]]; then
  echo "check_go_version: no \`go\` directive in $gomod" >&2
  exit 1
fi
if [[ -z $have ]]; then
  echo "check_go_version: no \`ARG GO_VERSION=<version>\` line in $dockerfile" >&2
  exit 1
fi
if [[ $have != "$want" ]]; then
  echo "check_go_version: $dockerfile installs Go $have but $gomod says \`go $want\`;" \
    "set ARG GO_VERSION=$want in the Dockerfile (or change go.mod)" >&2
  exit 1
fi
if ! grep -Eq '^FROM[[:space:]]+golang:\$\{GO_VERSION\}([@[:space:]]|$)' "$dockerfile"; then
  echo "check_go_version: $dockerfile must take Go from \`FROM golang:\${GO_VERSION}\`" \
    "(so that ARG GO_VERSION is the version installed)" >&2
  exit 1
fi
echo "check_go_version: ci/rocm/Dockerfile installs Go $have, as go.mod says"
