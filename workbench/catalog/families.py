"""The catalog's data: model families, their tasks, tiny configs and named sizes. Plain data,
no imports of torch or transformers.
"""

from __future__ import annotations

from typing import Any

from ..diffusion.parts import SD, VAE

MINILM = "pretrained-minilm"  # the real all-MiniLM-L6-v2, shipped by a PyPI package

# task -> transformers Auto class (the UNet's and Stable Diffusion's tasks are served by diffusers)
TASK_CLASSES = {
    "classification": "AutoModelForSequenceClassification",
    "causal_lm": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
}

# family -> its tasks (the first the default), tiny config and named sizes (hub id, fields)
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

FAMILIES["sd"] = SD
FAMILIES["vae"] = VAE
