// Package rocmroot fetches Debian's ROCm userspace releases (trixie: ROCr
// 6.1.2 over the thunk 6.2.4, HIP 5.7.1; sid: ROCr and HIP 6.4.3; each
// with comgr, rocBLAS on request) into private roots, without installing
// anything on the system, and starts programs inside them.
//
// A root is the whole closure of the release's packages, libc6 and the
// loader included, resolved by apt with a throwaway configuration (its own
// sources list naming the suite on the system's configured mirror, its own
// lists and cache folders, an empty dpkg status file), downloaded with
// apt-get download, checked against the archive's SHA-256 and unpacked with
// dpkg-deb -x into one folder. The versions are pinned in pins.txt; when
// the archive no longer serves a pinned version, the newest it serves is
// used and a WARNING line names the package, the pinned and the used
// version.
//
// Roots are cached in $ROCSYNC_ROCM_ROOTS or os.UserCacheDir()/rocsync/
// rocm-roots under the SHA-256 of their package list (names, versions,
// sizes, SHA-256s), private to the user, built in a temporary folder and
// renamed into place, and verified file by file against their manifest
// whenever they are reused (internal/diskcache.TreeManifest); a corrupt or
// foreign entry, or one with a file another user owns, is rebuilt, never
// used, and a cache folder of another user's is refused. A cached root of exactly the
// pinned packages is used without the network.
//
// The libraries of these releases need a newer glibc and libstdc++ than
// the host's, so a program runs inside a root through the root's own
// loader (Root.Command: ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/
// x86_64-linux-gnu [--preload LIB] PROGRAM). Go programs built with
// CGO_ENABLED=0 and purego dlopen the root's ROCr and HIP this way. There,
// /proc/self/exe names the loader: a program that starts itself again uses
// SelfCommand, and host tools are started with HostEnv's environment.
//
// CI fetches the roots with
//
//	go run ./hsa/kfdsim/rocmroot/cmd/fetchroot -release trixie,sid
//
// and cmd/rocmprobe loads a release's libraries and makes the first HSA
// and HIP calls inside a root.
package rocmroot
