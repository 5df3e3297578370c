"""Backend: isl domains -> loop IR -> Numba kernels (issue 6)."""
