#!/usr/bin/env bash
# Builds the rocsync kernels from src/elementwise.cl and src/reduce.cl into
# one code object (one PTX module) per target:
#   <out>/co/v5/<gfx>.hsaco   AMDGPU code objects v5, one per target below
#   <out>/co/v4/<gfx>.hsaco   code objects v4, for the targets in V4_TARGETS
#   <out>/co/v6/<generic>.hsaco  code objects v6 for the generic targets in
#                             GENERIC_TARGETS, one per processor family
#   <out>/ptx/<sm>.ptx        NVPTX assembly for the CUDA driver
#
# Usage: build.sh [OUTDIR]
#   OUTDIR defaults to this script's directory (kernels/), so `go generate`
#   refreshes the committed files; check_fresh.sh passes a temporary directory
#   and compares.
#
# Tools can be overridden with CLANG, LLD, READELF, OPT and LLVM_LINK; the
# committed files were built with clang-22 / ld.lld-22 / opt-22 / llvm-link-22 (the compiler version is recorded in each
# code object's .comment section).
#
# The output is deterministic: no build IDs, no debug info, and the source is
# compiled by its path relative to kernels/, so neither the checkout nor the
# output directory leaks into the files. check_fresh.sh relies on this.
set -euo pipefail

CLANG="${CLANG:-clang-22}"
LLD="${LLD:-ld.lld-22}"
READELF="${READELF:-llvm-readelf-22}"
OPT="${OPT:-opt-22}"
LLVM_LINK="${LLVM_LINK:-llvm-link-22}"

# AMD targets: every target rocBLAS builds for in ROCm 6.3, 7.0 and 7.1
# (TARGET_LIST_ROCM_6.3/7.0/7.1 of rocBLAS's CMake target list, rocBLAS in
# ROCm/rocm-libraries: gfx900 gfx906 gfx908 gfx90a gfx942 gfx950 gfx1010
# gfx1012 gfx1030 gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1200
# gfx1201), so that a GPU rocBLAS runs on has rocsync's kernels too. All
# were checked against `llc-22 -march=amdgcn -mcpu=help` (Debian clang
# 22.1.8) and accepted.
# No xnack/sramecc feature is given, so each code object is built for "any"
# (ELF flags XNACK_ANY | SRAMECC_ANY) and loads in either mode of its gfx.
AMD_TARGETS=(gfx900 gfx906 gfx908 gfx90a gfx942 gfx950 gfx1010 gfx1012 gfx1030
    gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1200 gfx1201)

# Generic targets (LLVM AMDGPUUsage, "Generic Processors"): one code object
# runs on every processor of its family, e.g. gfx11-generic on gfx1100-gfx1103
# and gfx1150-gfx1153. Generic targets exist only from code object v6, and
# ROCr loads them only once its ISA registry knows them (kernels.
# ROCrLoadsGeneric: library version 1.15, ROCm 6.4); kernels.CodeObjectFor
# serves one to a GPU of the family that has no exact object of its own.
# The families (AMDGPUUsage's table): gfx9-generic: gfx900 gfx902 gfx904
# gfx906 gfx909 gfx90c (not gfx908 or gfx90a); gfx9-4-generic: gfx940 gfx941
# gfx942 gfx950; gfx10-1-generic: gfx1010-gfx1013; gfx10-3-generic:
# gfx1030-gfx1036; gfx11-generic: gfx1100-gfx1103, gfx1150-gfx1153;
# gfx12-generic: gfx1200 gfx1201.
GENERIC_TARGETS=(gfx9-generic gfx9-4-generic gfx10-1-generic gfx10-3-generic gfx11-generic gfx12-generic)

# Targets that also get a code object v4: those that a ROCm 5.0-5.2 runtime
# knows (its ROCr ISA table has gfx900, gfx906, gfx908, gfx90a, gfx1010,
# gfx1012 and gfx1030 of ours, no gfx94x/gfx11xx/gfx12xx). HIP 5.0-5.2 cannot load v5 (its comgr cannot name
# the ISA of an ELF with ABI version 3) and ROCr 5.0-5.1 refuses v5, so these
# runtimes need v4. Every later release loads v5 (docs/codeobjects.md).
# clang-22 would build v4 for every target here (only the generic targets
# need v6), so the list is a choice, not a limit.
V4_TARGETS=(gfx900 gfx906 gfx908 gfx90a gfx1010 gfx1012 gfx1030)

# NVIDIA targets. clang-22 refuses sm_80/sm_90 at its default PTX ISA 4.2, so
# PTX 7.8 is requested explicitly (see the shared cuda-h100 notes).
PTX_TARGETS=(sm_80 sm_90)

# Code object versions are given per build (build_amd): clang-22 defaults
# to v6, which ROCr before 6.2 rejects (it is built only for the generic
# targets, which need it); v5 loads on ROCr 5.2 and HIP 5.3 and
# later and is what ROCm 6 itself emits; v4 loads on every ROCm 5.x-7.x.
# -cl-fp32-correctly-rounded-divide-sqrt makes f32 / and sqrt correctly
# rounded (OpenCL otherwise allows 2.5 and 3 ulp), so results match the CPU
# references bit for bit.
# -cl-kernel-arg-info puts argument names into the metadata, so the Go tests
# can check the names in Layout as well as the offsets.
COMMON_FLAGS=(-x cl -cl-std=CL2.0 -O3 -Wall -Werror
    -cl-fp32-correctly-rounded-divide-sqrt -cl-kernel-arg-info)
AMD_FLAGS=(--target=amdgcn-amd-amdhsa -nogpulib)
PTX_FLAGS=(--target=nvptx64-nvidia-cuda -nogpulib -Xclang -target-feature -Xclang +ptx78)

SRC=src/elementwise.cl
REDUCE_SRC=src/reduce.cl

# reduce.cl is compiled to bitcode first and its non-kernel functions are
# internalized and dropped before code generation. clang 22 emits every
# OpenCL kernel twice: the kernel, and an exported copy of its body
# (__clang_ocl_kern_imp_<name>) for kernels that call kernels. The reduction
# kernels use __local memory, and the AMDGPU backend warns ("local memory
# global used by non-kernel function") about the copy, which no kernel
# calls; with -Werror that is an error. Internalizing everything but the
# rocsync_* kernels lets globaldce remove the copies. The commas separate
# passes of one pipeline argument, not array elements.
# shellcheck disable=SC2054
INTERNALIZE=(-passes=internalize,globaldce -internalize-public-api-list='rocsync_*')

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here}"
mkdir -p "$out/co/v4" "$out/co/v5" "$out/co/v6" "$out/ptx"
out="$(cd "$out" && pwd)"
cd "$here"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() {
    echo "build.sh: $*" >&2
    exit 1
}

# build_amd VERSION GFX compiles and links one code object and checks it.
build_amd() {
    local version="$1" gfx="$2"
    local obj="$work/v$version-$gfx.o"
    local hsaco="$out/co/v$version/$gfx.hsaco"
    # One module for both sources, linked as bitcode: a code object carries
    # one metadata note, which the loaders read (lld would keep the notes of
    # two objects side by side, and the second would be ignored).
    local ebc="$work/v$version-$gfx.bc" rbc="$work/v$version-$gfx-reduce.bc" all="$work/v$version-$gfx-all.bc"
    "$CLANG" "${COMMON_FLAGS[@]}" "${AMD_FLAGS[@]}" -mcode-object-version="$version" \
        -mcpu="$gfx" -emit-llvm -c "$SRC" -o "$ebc"
    "$CLANG" "${COMMON_FLAGS[@]}" "${AMD_FLAGS[@]}" -mcode-object-version="$version" \
        -mcpu="$gfx" -emit-llvm -c "$REDUCE_SRC" -o "$rbc"
    "$OPT" "${INTERNALIZE[@]}" "$rbc" -o "$rbc"
    "$LLVM_LINK" "$ebc" "$rbc" -o "$all"
    "$CLANG" -O3 -Wall -Werror "${AMD_FLAGS[@]}" -mcode-object-version="$version" \
        -mcpu="$gfx" -c "$all" -o "$obj"
    "$LLD" -shared --build-id=none "$obj" -o "$hsaco"
    chmod 0644 "$hsaco" # data, not an executable for this host

    # Nothing may be left for a library to provide: -nogpulib links none, and
    # the ROCr loader would refuse an undefined symbol at load time.
    local undefined
    undefined="$("$READELF" --wide --dyn-syms --syms "$hsaco" |
        awk '$7 == "UND" && $8 != "" { print $8 }' | sort -u)"
    if [[ -n "$undefined" ]]; then
        fail "v$version $gfx: undefined symbols: $undefined"
    fi

    # No hidden arguments: the kernels read the grid from the dispatch
    # packet, so at -O3 the AMDGPU attributor marks them
    # amdgpu-no-implicitarg-ptr and the compiler emits no hidden_* entries
    # (an -O0 v4 build has seven, 56 bytes). A dispatcher fills exactly the
    # 40 bytes of kernels.Layout (kernels.ReduceLayout for the reductions);
    # fail here if that ever changes.
    if "$READELF" --notes "$hsaco" | grep -q 'value_kind: *hidden_'; then
        fail "v$version $gfx: the kernels have hidden arguments"
    fi
}

for gfx in "${AMD_TARGETS[@]}"; do
    build_amd 5 "$gfx"
done
for gfx in "${V4_TARGETS[@]}"; do
    build_amd 4 "$gfx"
done
for gfx in "${GENERIC_TARGETS[@]}"; do
    build_amd 6 "$gfx"
done

for sm in "${PTX_TARGETS[@]}"; do
    ptx="$out/ptx/$sm.ptx"
    # One module for both sources: bitcode, linked, then PTX.
    "$CLANG" "${COMMON_FLAGS[@]}" "${PTX_FLAGS[@]}" -march="$sm" -emit-llvm -c "$SRC" -o "$work/$sm.bc"
    "$CLANG" "${COMMON_FLAGS[@]}" "${PTX_FLAGS[@]}" -march="$sm" -emit-llvm -c "$REDUCE_SRC" -o "$work/$sm-reduce.bc"
    "$OPT" "${INTERNALIZE[@]}" "$work/$sm-reduce.bc" -o "$work/$sm-reduce.bc"
    "$LLVM_LINK" "$work/$sm.bc" "$work/$sm-reduce.bc" -o "$work/$sm-all.bc"
    "$CLANG" -O3 -Wall -Werror "${PTX_FLAGS[@]}" -march="$sm" -S "$work/$sm-all.bc" -o "$ptx"
    # An .extern declaration is a call the CUDA driver cannot resolve
    # (libdevice is not linked).
    if externs="$(grep '^[[:space:]]*\.extern' "$ptx")"; then
        fail "$sm: PTX declares external functions: $externs"
    fi
done
