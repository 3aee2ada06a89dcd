// Package userkernel turns a user's own GPU kernel into something rocsync
// can dispatch like its built-in ones: a built image for the device's
// target, the kernel's signature read from the image's own metadata, and,
// per launch, an argument block packed from checked arguments.
//
// A kernel comes from one of three kinds of Source:
//
//   - AMD code objects, one per gfx target (and code-object version), picked
//     by the device's ISA and the versions its runtime loads, as rocsync's
//     own kernels are (kernels.PickCodeObjectVersion);
//   - PTX for the CUDA backend, the newest module not newer than the device;
//   - OpenCL C source, compiled at run time with the machine's clang for the
//     device's target: amdgcn-amd-amdhsa (linked by ld.lld into a code
//     object of the version the runtime loads) or nvptx64 (PTX for sm_XX).
//
// A Builder compiles OpenCL sources and keeps the results in an on-disk
// cache keyed by a content hash of everything that decides the output
// (source, options, compiler and linker versions, target, code-object
// version); entries are written atomically, verified when read, and a
// corrupt or foreign one is rebuilt, never loaded. A Registry loads each
// image once per device through a Loader the device's driver implements.
//
// A machine without a compiler (a GPU host with only the driver) runs
// OpenCL kernels from a cache filled on one with clang: every build is
// also stored as a prebuilt entry keyed by source, options and target but
// not the tools' versions, which is read only when no compiler is found.
// Fill a cache for an architecture by building for a Device with that ISA
// (Device{ISA: "sm_90"}) with CacheDir (or $ROCSYNC_KERNEL_CACHE) set,
// carry the directory over, make it private to the user that runs there
// (chmod -R go= DIR: entries readable by others are refused), and point
// $ROCSYNC_KERNEL_CACHE at it. A missing entry is an ErrNoCompiler error;
// a corrupt, foreign or too-open one is ErrNoCompiler and ErrCacheEntry;
// neither is loaded.
//
// An emulated device (Device.Emulated: rocsync's emulator, which runs a
// kernel as the Go reference registered for its name, see References)
// needs the kernel's signature only. Where no compiler is found, and the
// cache holds no build, an OpenCL source builds for it into a declared
// image: the signatures read from the kernels' OpenCL C declarations, in
// the layout clang gives them, or from declarations the user gives
// (WithDeclarations) where a macro or a typedef hides them. A reference
// reads its buffer arguments as slices of their declared element types
// (Slice) and its scalars with Arg's typed getters.
//
// Signature.Pack checks a launch (geometry, buffers with their access,
// typed scalars) against the kernel's metadata and writes the kernarg
// block; every mistake is a *ArgError (errors.Is ErrKernelArgs) or a
// *GeometryError (errors.Is ErrGeometry) before anything reaches the GPU.
// Pack allocates nothing.
//
// The package refuses to know how work is ordered, how buffers are tracked
// or which queue a launch goes to: it hands the op path a kernel handle, a
// packed argument block and the list of buffer accesses, and the op path
// declares those accesses and dispatches. It also refuses to know any
// runtime's API: loading into HSA, HIP or CUDA is the Loader's job.
package userkernel
