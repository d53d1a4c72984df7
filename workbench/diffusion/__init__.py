"""Diffusion: Stable Diffusion's parts, the denoising objectives, images and the latent cache."""
