"""Stable Diffusion's and its VAE's entries of the model table: each part's config (tiny and
named sizes), the schedulers', and the family's tokenizer. Plain data.
"""

from __future__ import annotations

from typing import Any

# Stable Diffusion: one config per part of the pipeline (diffusers' names: text_encoder and
# tokenizer, vae, unet, scheduler for training; sampler is the scheduler that samples).
SD_SCHEDULER = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "prediction_type": "epsilon",
    "clip_sample": False,
}
_SD_VAE = {
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "sample_size": 512,
    "scaling_factor": 0.18215,
}
_CLIP_L = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "max_position_embeddings": 77,
    "vocab_size": 49408,
    "projection_dim": 768,
    "hidden_act": "quick_gelu",
}
SD: dict[str, Any] = {
    "about": "Stable Diffusion: CLIP text encoder, VAE, text-conditioned UNet (latent diffusion)",
    "tasks": ("text_to_image",),
    "model_type": "sd",
    "tokenizer": "gpt2",  # tiny: the bundled byte-level BPE (CLIP's is a byte-level BPE too)
    # 32x32 RGB images, 16x16x4 latents, captions of 16 tokens
    "tiny": {
        "text_encoder": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
            "projection_dim": 64,
        },
        "vae": {
            "in_channels": 3,
            "out_channels": 3,
            "latent_channels": 4,
            "layers_per_block": 1,
            "block_out_channels": [32, 64],
            "down_block_types": ["DownEncoderBlock2D"] * 2,
            "up_block_types": ["UpDecoderBlock2D"] * 2,
            "norm_num_groups": 8,
            "sample_size": 32,
            "scaling_factor": 1.0,
        },
        "unet": {
            "sample_size": 16,
            "in_channels": 4,
            "out_channels": 4,
            "layers_per_block": 1,
            "block_out_channels": [32, 64],
            "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
            "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
            "cross_attention_dim": 64,
            "attention_head_dim": 8,
            "norm_num_groups": 8,
        },
        "scheduler": SD_SCHEDULER,
        "sampler": "DDIMScheduler",
    },
    # hub id + each part's architecture (its config.json), for num_params offline
    "sizes": {
        "sd15": (
            "stable-diffusion-v1-5/stable-diffusion-v1-5",
            {
                "text_encoder": _CLIP_L,
                "vae": _SD_VAE,
                "scheduler": SD_SCHEDULER,
                "sampler": "PNDMScheduler",
                "unet": {"sample_size": 64, "cross_attention_dim": 768},
            },
        ),
        "sd21-base": (
            "stabilityai/stable-diffusion-2-1-base",
            {
                "text_encoder": {
                    **_CLIP_L,
                    "hidden_size": 1024,
                    "intermediate_size": 4096,
                    "num_hidden_layers": 23,
                    "num_attention_heads": 16,
                    "projection_dim": 512,
                    "hidden_act": "gelu",
                },
                "vae": _SD_VAE,
                "scheduler": SD_SCHEDULER,
                "sampler": "PNDMScheduler",
                "unet": {
                    "sample_size": 64,
                    "cross_attention_dim": 1024,
                    "attention_head_dim": [5, 10, 20, 20],
                    "use_linear_projection": True,
                },
            },
        ),
        "sdxl": (
            "stabilityai/stable-diffusion-xl-base-1.0",
            {
                "text_encoder": _CLIP_L,
                "text_encoder_2": {
                    **_CLIP_L,
                    "hidden_size": 1280,
                    "intermediate_size": 5120,
                    "num_hidden_layers": 32,
                    "num_attention_heads": 20,
                    "projection_dim": 1280,
                    "hidden_act": "gelu",
                },
                "vae": {**_SD_VAE, "sample_size": 1024, "scaling_factor": 0.13025},
                "scheduler": SD_SCHEDULER,
                "sampler": "EulerDiscreteScheduler",
                "unet": {
                    "sample_size": 128,
                    "block_out_channels": [320, 640, 1280],
                    "down_block_types": [
                        "DownBlock2D",
                        "CrossAttnDownBlock2D",
                        "CrossAttnDownBlock2D",
                    ],
                    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                    "transformer_layers_per_block": [1, 2, 10],
                    "attention_head_dim": [5, 10, 20],
                    "cross_attention_dim": 2048,
                    "addition_embed_type": "text_time",
                    "addition_time_embed_dim": 256,
                    "projection_class_embeddings_input_dim": 2816,
                    "use_linear_projection": True,
                },
            },
        ),
    },
}
# A VAE trained on its own (reconstruction + KL) for Stable Diffusion: wb.model("sd", vae=run)
VAE: dict[str, Any] = {
    "about": "Stable Diffusion's image autoencoder (AutoencoderKL): reconstruction + KL",
    "tasks": ("text_to_image",),  # it trains on the images of captioned image data
    "model_type": "vae",
    "tokenizer": "gpt2",  # captioned data is tokenized on the way (the VAE ignores the captions)
    "tiny": {"vae": SD["tiny"]["vae"]},
    "sizes": {},
}
