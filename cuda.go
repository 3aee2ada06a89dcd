package rocsync

import "github.com/rocsync/rocsync/internal/cudadev"

// openCUDA opens every NVIDIA GPU through the CUDA driver API and cuBLAS.
func openCUDA(o Options) (family, error) {
	c := &configs{o: o}
	devs, err := cudadev.OpenFunc(c.configFor)
	if err != nil {
		return family{}, err
	}
	return family{name: "cuda", devs: devs, stats: c.stats, throttle: c.throttle}, nil
}
