#!/usr/bin/env bash
# Entry point of the ROCm CI container (ci/rocm/Dockerfile); also runs
# directly from a checkout.
#
# With an AMD GPU (/dev/kfd usable and at least one GPU agent):
#   ROCSYNC_GPU=1 go test ./...          -> $ARTIFACTS/test.log
#   go run ./bench -backend rocm -json-file … -plot …
#                                   -> $ARTIFACTS/bench.{txt,json,png}
#   (plus rocminfo.txt and env.txt describing the machine)
# Without one: go test ./... on the emulator, and a clear message that the
# hardware suite was skipped. Nothing is written to $ARTIFACTS then.
#
# Usage: entrypoint.sh [--no-gpu | --require-gpu | --gpu]
#   --no-gpu       take the no-GPU path even when a GPU is there (our CI)
#   --require-gpu  fail, rather than fall back to the emulator, when no GPU is
#                  found (the self-hosted AMD runner)
#   --gpu          take the GPU path without looking for a GPU: one that only
#                  the test and bench programs see, such as the simulated
#                  driver's behind ROCSYNC_GO_EXEC (our CI)
# Environment:
#   ARTIFACTS             where results go (default /artifacts)
#   ROCSYNC_CI_TEST_PKGS  space-separated packages to test (default ./...)
#   ROCSYNC_CI_TEST_FLAGS extra flags for go test on the GPU path (e.g.
#                         "-run TestConformanceOnHardware/SeedPrograms")
#   ROCSYNC_BENCH_FLAGS   extra flags for the bench run (e.g. "-iters 50")
#   ROCSYNC_GO_EXEC       a program that starts the test binaries and the
#                         bench (go's -exec), e.g. "simrun -rocm 6.4.3
#                         -gpus gfx90a -simblas --" (hsa/kfdsim/cmd/simrun)
#
# Exits non-zero on any failure.
set -euo pipefail

usage() { sed -n '2,/^set /{s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }

mode=auto
while (($#)); do
  case "$1" in
    --no-gpu) mode=no-gpu ;;
    --require-gpu) mode=require-gpu ;;
    --gpu) mode=gpu ;;
    -h | --help) usage; exit 0 ;;
    *) echo "entrypoint: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null 2>&1 || { echo "entrypoint: go not found" >&2; exit 1; }

artifacts=${ARTIFACTS:-/artifacts}
read -r -a pkgs <<<"${ROCSYNC_CI_TEST_PKGS:-./...}"
((${#pkgs[@]})) || pkgs=(./...)
read -r -a bench_flags <<<"${ROCSYNC_BENCH_FLAGS:-}"
read -r -a test_flags <<<"${ROCSYNC_CI_TEST_FLAGS:-}"
go_exec=()
if [[ -n ${ROCSYNC_GO_EXEC:-} ]]; then
  go_exec=(-exec "$ROCSYNC_GO_EXEC")
fi

log() { printf '\n== %s\n' "$*"; }

# gpu_reason prints why there is no usable GPU and returns 1, or returns 0
# when /dev/kfd can be opened and at least one GPU agent exists.
gpu_reason() {
  if [[ ! -e /dev/kfd ]]; then
    echo "/dev/kfd does not exist (no amdgpu driver, or not passed with --device=/dev/kfd)"
    return 1
  fi
  if [[ ! -r /dev/kfd || ! -w /dev/kfd ]]; then
    echo "/dev/kfd is not readable and writable by uid $(id -u) (groups: $(id -G)); add the group that owns it (ls -ln /dev/kfd) with --group-add"
    return 1
  fi
  local rocminfo
  if rocminfo=$(command -v rocminfo || { [[ -x /opt/rocm/bin/rocminfo ]] && echo /opt/rocm/bin/rocminfo; }); then
    local out
    if ! out=$("$rocminfo" 2>&1); then
      echo "rocminfo failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
      return 1
    fi
    if ! grep -Eq '^[[:space:]]*Device Type:[[:space:]]+GPU' <<<"$out"; then
      echo "rocminfo lists no GPU agent"
      return 1
    fi
    return 0
  fi
  # No rocminfo: CPU nodes of the KFD topology have simd_count 0, GPUs more.
  local props simd
  for props in /sys/class/kfd/kfd/topology/nodes/*/properties; do
    [[ -r "$props" ]] || continue
    simd=$(awk '$1 == "simd_count" { print $2; exit }' "$props")
    if [[ "${simd:-0}" =~ ^[0-9]+$ ]] && ((simd > 0)); then
      return 0
    fi
  done
  echo "no GPU agent in /sys/class/kfd/kfd/topology/nodes (no node with simd_count > 0)"
  return 1
}

no_gpu() {
  local why=$1
  log "no AMD GPU: $why"
  log "go test ${pkgs[*]} (emulator)"
  env -u ROCSYNC_GPU go test -count=1 "${pkgs[@]}"
  echo
  echo "no AMD GPU: the hardware suite (ROCSYNC_GPU=1) was skipped ($why)"
}

with_gpu() {
  mkdir -p "$artifacts"
  log "AMD GPU found; results go to $artifacts"
  { go version; go env GOOS GOARCH CGO_ENABLED; uname -a; cat /opt/rocm/.info/version; } >"$artifacts/env.txt" 2>&1 || true
  if command -v rocminfo >/dev/null 2>&1; then
    rocminfo >"$artifacts/rocminfo.txt" 2>&1 || true
    grep -E '^[[:space:]]*(Name:[[:space:]]+gfx|Marketing Name:)' "$artifacts/rocminfo.txt" || true
  fi

  log "ROCSYNC_GPU=1 go test ${go_exec[*]} ${test_flags[*]} ${pkgs[*]}"
  ROCSYNC_GPU=1 go test -count=1 "${go_exec[@]}" "${test_flags[@]}" "${pkgs[@]}" 2>&1 | tee "$artifacts/test.log"

  log "go run ./bench -backend rocm -json-file $artifacts/bench.json -plot $artifacts/bench.png"
  tmp=$(mktemp -d) # global: the EXIT trap runs after this function returns
  trap 'rm -rf "$tmp"' EXIT
  # One run gives the table (stdout, kept in bench.txt), the JSON and the
  # chart; files go through $tmp so a failure leaves no half-written one.
  go run "${go_exec[@]}" ./bench -backend rocm "${bench_flags[@]}" -json-file "$tmp/bench.json" -plot "$tmp/bench.png" |
    tee "$artifacts/bench.txt"
  mv "$tmp/bench.json" "$tmp/bench.png" "$artifacts/"

  log "done; artifacts:"
  ls -l "$artifacts"
}

if [[ $mode == no-gpu ]]; then
  no_gpu "--no-gpu given"
  exit 0
fi

if [[ $mode == gpu ]]; then
  with_gpu
elif why=$(gpu_reason); then
  with_gpu
elif [[ $mode == require-gpu ]]; then
  echo "entrypoint: --require-gpu, but no usable AMD GPU: $why" >&2
  exit 1
else
  no_gpu "$why"
fi
