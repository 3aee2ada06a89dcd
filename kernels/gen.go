package kernels

// build.sh needs clang-22 and ld.lld-22 (override with CLANG, LLD, READELF).
// It rewrites co/v4/*.hsaco, co/v5/*.hsaco and ptx/*.ptx; check_fresh.sh
// verifies them.
//go:generate bash build.sh
