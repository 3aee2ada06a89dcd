#!/usr/bin/env bash
# Fails if the committed kernels/co/v*/*.hsaco or kernels/ptx/*.ptx differ from
# what build.sh makes from src/elementwise.cl and src/reduce.cl now: CI runs this so that a
# source edit cannot ship without its rebuilt code objects.
#
# Usage: check_fresh.sh   (needs the same tools as build.sh)
set -euo pipefail

# toolchain_of prints the compiler and linker recorded in the .comment
# section of the first code object in a directory.
toolchain_of() {
    local first
    first="$(find "$1" -name '*.hsaco' -print | sort | head -n 1)"
    [[ -n "$first" ]] || return 1
    "${READELF:-llvm-readelf-22}" --string-dump=.comment "$first" |
        sed -n 's/^\[ *[0-9a-f]*\] //p' | paste -sd ';' -
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT

bash "$here/build.sh" "$fresh"

stale=()
# co itself must hold no files, only the per-version directories.
for dir in co co/v4 co/v5 co/v6 ptx; do
    # Files built now, compared with the committed ones.
    for built in "$fresh/$dir"/*; do
        [[ -f "$built" ]] || continue
        name="$dir/$(basename "$built")"
        if [[ ! -f "$here/$name" ]]; then
            stale+=("$name (built, but not committed)")
        elif ! cmp -s "$built" "$here/$name"; then
            stale+=("$name (differs)")
        fi
    done
    # Committed files that the build no longer makes.
    for committed in "$here/$dir"/*; do
        [[ -f "$committed" ]] || continue
        name="$dir/$(basename "$committed")"
        if [[ ! -f "$fresh/$name" ]]; then
            stale+=("$name (committed, but no longer built)")
        fi
    done
done

if ((${#stale[@]} > 0)); then
    {
        echo "check_fresh.sh: the committed kernels are stale:"
        printf '  kernels/%s\n' "${stale[@]}"
        echo "Rebuild with 'go generate ./kernels/' (or 'bash kernels/build.sh') and commit the result."
        # A different compiler release changes the bytes even when the source
        # did not change; the .comment section says which one built each.
        committed_cc="$(toolchain_of "$here/co/v5" || true)"
        fresh_cc="$(toolchain_of "$fresh/co/v5" || true)"
        if [[ "$committed_cc" != "$fresh_cc" ]]; then
            echo "Note: the compilers differ: committed files by '$committed_cc', this build by '$fresh_cc'."
        fi
    } >&2
    exit 1
fi
echo "check_fresh.sh: kernels/co/v4, kernels/co/v5, kernels/co/v6 and kernels/ptx are up to date."
