"""The catalog's data: model families, their tasks, tiny configs and named sizes.

Plain data, no imports of torch or transformers: ``catalog`` builds specs from it and the
pickers list it.
"""

from __future__ import annotations

from typing import Any

MINILM = "pretrained-minilm"  # the real all-MiniLM-L6-v2, shipped by a PyPI package

# task -> transformers Auto class (the UNet's and Stable Diffusion's tasks are served by diffusers)
TASK_CLASSES = {
    "classification": "AutoModelForSequenceClassification",
    "causal_lm": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
}

# family -> its default task, the tasks it supports, its tiny config, and named sizes
# (hub id + the architecture fields that differ from the tiny config).
FAMILIES: dict[str, dict[str, Any]] = {
    "bert": {
        "about": "encoder (BERT), sequence classification",
        "tasks": ("classification",),
        "model_type": "bert",
        "tokenizer": "bert",
        "tiny": {
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 512,
            "max_position_embeddings": 512,
        },
        "sizes": {
            "base": (
                "google-bert/bert-base-uncased",
                {
                    "hidden_size": 768,
                    "num_hidden_layers": 12,
                    "num_attention_heads": 12,
                    "intermediate_size": 3072,
                    "vocab_size": 30522,
                },
            ),
            "large": (
                "google-bert/bert-large-uncased",
                {
                    "hidden_size": 1024,
                    "num_hidden_layers": 24,
                    "num_attention_heads": 16,
                    "intermediate_size": 4096,
                    "vocab_size": 30522,
                },
            ),
            MINILM: (
                "sentence-transformers/all-MiniLM-L6-v2",
                {
                    "hidden_size": 384,
                    "num_hidden_layers": 6,
                    "num_attention_heads": 12,
                    "intermediate_size": 1536,
                    "vocab_size": 30522,
                },
            ),
        },
    },
    "gpt2": {
        "about": "decoder (GPT-2), causal language modelling",
        "tasks": ("causal_lm", "classification"),
        "model_type": "gpt2",
        "tokenizer": "gpt2",
        "tiny": {"n_embd": 128, "n_layer": 2, "n_head": 2, "n_positions": 512},
        "sizes": {
            "small": (
                "openai-community/gpt2",
                {
                    "n_embd": 768,
                    "n_layer": 12,
                    "n_head": 12,
                    "n_positions": 1024,
                    "vocab_size": 50257,
                },
            ),
            "medium": (
                "openai-community/gpt2-medium",
                {
                    "n_embd": 1024,
                    "n_layer": 24,
                    "n_head": 16,
                    "n_positions": 1024,
                    "vocab_size": 50257,
                },
            ),
            "large": (
                "openai-community/gpt2-large",
                {
                    "n_embd": 1280,
                    "n_layer": 36,
                    "n_head": 20,
                    "n_positions": 1024,
                    "vocab_size": 50257,
                },
            ),
            "xl": (
                "openai-community/gpt2-xl",
                {
                    "n_embd": 1600,
                    "n_layer": 48,
                    "n_head": 25,
                    "n_positions": 1024,
                    "vocab_size": 50257,
                },
            ),
        },
    },
    "t5": {
        "about": "encoder-decoder (T5), sequence to sequence",
        "tasks": ("seq2seq",),
        "model_type": "t5",
        "tokenizer": "t5",
        "tiny": {
            "d_model": 128,
            "d_ff": 512,
            "d_kv": 32,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
        },
        "sizes": {
            "small": (
                "google-t5/t5-small",
                {
                    "d_model": 512,
                    "d_ff": 2048,
                    "d_kv": 64,
                    "num_layers": 6,
                    "num_decoder_layers": 6,
                    "num_heads": 8,
                    "vocab_size": 32128,
                },
            ),
            "base": (
                "google-t5/t5-base",
                {
                    "d_model": 768,
                    "d_ff": 3072,
                    "d_kv": 64,
                    "num_layers": 12,
                    "num_decoder_layers": 12,
                    "num_heads": 12,
                    "vocab_size": 32128,
                },
            ),
            "large": (
                "google-t5/t5-large",
                {
                    "d_model": 1024,
                    "d_ff": 4096,
                    "d_kv": 64,
                    "num_layers": 24,
                    "num_decoder_layers": 24,
                    "num_heads": 16,
                    "vocab_size": 32128,
                },
            ),
            "3b": (
                "google-t5/t5-3b",
                {
                    "d_model": 1024,
                    "d_ff": 16384,
                    "d_kv": 128,
                    "num_layers": 24,
                    "num_decoder_layers": 24,
                    "num_heads": 32,
                    "vocab_size": 32128,
                },
            ),
        },
    },
    "llama": {
        "about": "decoder (Llama), causal language modelling",
        "tasks": ("causal_lm", "classification"),
        "model_type": "llama",
        "tokenizer": "llama",
        "tiny": {
            "hidden_size": 128,
            "intermediate_size": 344,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "tie_word_embeddings": True,
        },
        # max_position_embeddings as each model's config.json on the hub has it (Llama 2: 4,096;
        # Llama 3.1 / 3.2: 131,072): the longest seq_len the planner accepts
        "sizes": {
            "1b": (
                "meta-llama/Llama-3.2-1B",
                {
                    "hidden_size": 2048,
                    "intermediate_size": 8192,
                    "num_hidden_layers": 16,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 8,
                    "vocab_size": 128256,
                    "max_position_embeddings": 131072,
                    "tie_word_embeddings": True,
                },
            ),
            "7b": (
                "meta-llama/Llama-2-7b-hf",
                {
                    "hidden_size": 4096,
                    "intermediate_size": 11008,
                    "num_hidden_layers": 32,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 32,
                    "vocab_size": 32000,
                    "max_position_embeddings": 4096,
                    "tie_word_embeddings": False,
                },
            ),
            "8b": (
                "meta-llama/Llama-3.1-8B",
                {
                    "hidden_size": 4096,
                    "intermediate_size": 14336,
                    "num_hidden_layers": 32,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 8,
                    "vocab_size": 128256,
                    "max_position_embeddings": 131072,
                    "tie_word_embeddings": False,
                },
            ),
            "70b": (
                "meta-llama/Llama-2-70b-hf",
                {
                    "hidden_size": 8192,
                    "intermediate_size": 28672,
                    "num_hidden_layers": 80,
                    "num_attention_heads": 64,
                    "num_key_value_heads": 8,
                    "vocab_size": 32000,
                    "max_position_embeddings": 4096,
                    "tie_word_embeddings": False,
                },
            ),
            # Llama 3 70B: Llama 2 70B's shape with a 128,256-token vocabulary, 8,192 positions
            # and RoPE base 500,000 (the model's config.json on the hub)
            "3-70b": (
                "meta-llama/Meta-Llama-3-70B",
                {
                    "hidden_size": 8192,
                    "intermediate_size": 28672,
                    "num_hidden_layers": 80,
                    "num_attention_heads": 64,
                    "num_key_value_heads": 8,
                    "vocab_size": 128256,
                    "max_position_embeddings": 8192,
                    "rope_theta": 500000.0,
                    "tie_word_embeddings": False,
                },
            ),
        },
    },
    "unet": {
        "about": "diffusers UNet, denoising diffusion (DDPM)",
        "tasks": ("diffusion",),
        "model_type": "unet",
        "tokenizer": None,
        "tiny": {
            "sample_size": 32,
            "in_channels": 1,
            "out_channels": 1,
            "block_out_channels": [32, 64, 64],
            "layers_per_block": 1,
            "norm_num_groups": 8,
            "down_block_types": ["DownBlock2D", "AttnDownBlock2D", "DownBlock2D"],
            "up_block_types": ["UpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
        },
        "sizes": {
            "ddpm-cifar10": (
                "google/ddpm-cifar10-32",
                {
                    "sample_size": 32,
                    "in_channels": 3,
                    "out_channels": 3,
                    "block_out_channels": [128, 256, 256, 256],
                    "layers_per_block": 2,
                    "norm_num_groups": 32,
                    "down_block_types": [
                        "DownBlock2D",
                        "AttnDownBlock2D",
                        "DownBlock2D",
                        "DownBlock2D",
                    ],
                    "up_block_types": ["UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
                },
            ),
            # Stable Diffusion 1.5's UNet (latent 64x64x4, text-conditioned): diffusers'
            # UNet2DConditionModel defaults with cross-attention width 768.
            "sd15": (
                "stable-diffusion-v1-5/stable-diffusion-v1-5",
                {
                    "sample_size": 64,
                    "cross_attention_dim": 768,
                    "subfolder": "unet",
                    "conditional": True,
                },
            ),
        },
    },
}

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
FAMILIES["sd"] = {
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
    # hub id + each part's architecture (the repositories' config.json files), for
    # num_params offline
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
# A VAE trained on its own (reconstruction + KL) for Stable Diffusion's latents:
# wb.model("sd", vae=run)
FAMILIES["vae"] = {
    "about": "Stable Diffusion's image autoencoder (AutoencoderKL): reconstruction + KL",
    "tasks": ("text_to_image",),  # it trains on the images of captioned image data
    "model_type": "vae",
    "tokenizer": "gpt2",  # captioned data is tokenized on the way (the VAE ignores the captions)
    "tiny": {"vae": FAMILIES["sd"]["tiny"]["vae"]},
    "sizes": {},
}
