package kernels

// build.sh needs clang-22 and ld.lld-22 (override with CLANG, LLD, READELF).
// It rewrites co/*.hsaco and ptx/*.ptx; check_fresh.sh verifies them.
//go:generate bash build.sh
