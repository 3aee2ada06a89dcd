#!/usr/bin/env bash
# Builds the rocsync elementwise kernels from src/elementwise.cl:
#   <out>/co/<gfx>.hsaco   AMDGPU code objects, one per target below
#   <out>/ptx/<sm>.ptx     NVPTX assembly for the CUDA driver
#
# Usage: build.sh [OUTDIR]
#   OUTDIR defaults to this script's directory (kernels/), so `go generate`
#   refreshes the committed files; check_fresh.sh passes a temporary directory
#   and compares.
#
# Tools can be overridden with CLANG, LLD and READELF; the committed files were
# built with clang-22 / ld.lld-22 (the compiler version is recorded in each
# code object's .comment section).
#
# The output is deterministic: no build IDs, no debug info, and the source is
# compiled by its path relative to kernels/, so neither the checkout nor the
# output directory leaks into the files. check_fresh.sh relies on this.
set -euo pipefail

CLANG="${CLANG:-clang-22}"
LLD="${LLD:-ld.lld-22}"
READELF="${READELF:-llvm-readelf-22}"

# AMD targets. All were checked against `llc-22 -march=amdgcn -mcpu=help`
# (Debian clang 22.1.8) and accepted: gfx908 gfx90a gfx942 gfx950 gfx1030
# gfx1100 gfx1101 gfx1200 gfx1201.
# No xnack/sramecc feature is given, so each code object is built for "any"
# (ELF flags XNACK_ANY | SRAMECC_ANY) and loads in either mode of its gfx.
AMD_TARGETS=(gfx908 gfx90a gfx942 gfx950 gfx1030 gfx1100 gfx1101 gfx1200 gfx1201)

# NVIDIA targets. clang-22 refuses sm_80/sm_90 at its default PTX ISA 4.2, so
# PTX 7.8 is requested explicitly (see the shared cuda-h100 notes).
PTX_TARGETS=(sm_80 sm_90)

# Code object v5: clang-22 defaults to v6, which ROCr before 6.2 rejects;
# v5 loads on ROCr 5.2 and later and is what ROCm 6 itself emits.
# -cl-fp32-correctly-rounded-divide-sqrt makes f32 / and sqrt correctly
# rounded (OpenCL otherwise allows 2.5 and 3 ulp), so results match the CPU
# references bit for bit.
# -cl-kernel-arg-info puts argument names into the metadata, so the Go tests
# can check the names in Layout as well as the offsets.
COMMON_FLAGS=(-x cl -cl-std=CL2.0 -O3 -Wall -Werror
    -cl-fp32-correctly-rounded-divide-sqrt -cl-kernel-arg-info)
AMD_FLAGS=(--target=amdgcn-amd-amdhsa -nogpulib -mcode-object-version=5)
PTX_FLAGS=(--target=nvptx64-nvidia-cuda -nogpulib -Xclang -target-feature -Xclang +ptx78)

SRC=src/elementwise.cl

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here}"
mkdir -p "$out/co" "$out/ptx"
out="$(cd "$out" && pwd)"
cd "$here"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() {
    echo "build.sh: $*" >&2
    exit 1
}

for gfx in "${AMD_TARGETS[@]}"; do
    obj="$work/$gfx.o"
    hsaco="$out/co/$gfx.hsaco"
    "$CLANG" "${COMMON_FLAGS[@]}" "${AMD_FLAGS[@]}" -mcpu="$gfx" -c "$SRC" -o "$obj"
    "$LLD" -shared --build-id=none "$obj" -o "$hsaco"
    chmod 0644 "$hsaco" # data, not an executable for this host

    # Nothing may be left for a library to provide: -nogpulib links none, and
    # the ROCr loader would refuse an undefined symbol at load time.
    undefined="$("$READELF" --wide --dyn-syms --syms "$hsaco" |
        awk '$7 == "UND" && $8 != "" { print $8 }' | sort -u)"
    if [[ -n "$undefined" ]]; then
        fail "$gfx: undefined symbols: $undefined"
    fi
done

for sm in "${PTX_TARGETS[@]}"; do
    ptx="$out/ptx/$sm.ptx"
    "$CLANG" "${COMMON_FLAGS[@]}" "${PTX_FLAGS[@]}" -march="$sm" -S "$SRC" -o "$ptx"
    # An .extern declaration is a call the CUDA driver cannot resolve
    # (libdevice is not linked).
    if externs="$(grep '^[[:space:]]*\.extern' "$ptx")"; then
        fail "$sm: PTX declares external functions: $externs"
    fi
done
