"""Attention kernels for MLA and DSA over the latent cache (installed as `jev.kernels`)."""
