"""The latent cache: a dataset's image latents and caption embeddings, encoded once.

``cached`` encodes every row of both splits once (``TextToImage.encode``), and each step then
runs the UNet alone. Kept per row: the VAE's latent distribution (``latent_mean``,
``latent_std``, unscaled: each step still draws its latents as from images), the caption's
embeddings (``context``; SDXL: ``pooled``), and once the empty prompt's (caption dropout).

One file, ``$WORKBENCH_CACHE/latents/<key>.safetensors``, written atomically; the key hashes
everything the encodings depend on (the prepared dataset, the VAE encoder's and text encoders'
weights, the resolution, the dtypes), so a stale cache is never read. Random crops and flips
cannot be encoded once: ``recipe.check_cache_latents`` refuses them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import torch

from ..settings import cache_root
from .texttoimage import DTYPES

FORMAT = 1  # bump when what is encoded, or how, changes: old files are then never read


def weights_digest(modules, prefixes: tuple[str, ...] = ("",)) -> str:
    """sha256 of the names, dtypes, shapes and bytes of ``modules``' weights whose names
    start with one of ``prefixes``."""
    h = hashlib.sha256()
    for module in modules:
        for name, t in sorted(module.state_dict().items()):
            if not name.startswith(prefixes):
                continue
            t = t.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(t.view(torch.uint8).numpy())  # the raw bytes, whatever the dtype (bf16 too)
    return h.hexdigest()


def cache_key(model, dspec, prepared, precision: str) -> str:
    """The key of ``model``'s encodings of ``prepared`` (a DatasetDict from ``dspec``)."""
    vae = model.vae
    text = [m for m in (model.text_encoder, model.text_encoder_2) if m is not None]
    parts = {
        "format": FORMAT,
        "data": dspec.to_dict(),
        "crop": dspec.crop,
        "splits": {
            s: [len(ds), getattr(ds, "_fingerprint", None)] for s, ds in sorted(prepared.items())
        },
        "vae_encoder": weights_digest([vae], ("encoder.", "quant_conv.")),
        "text_encoders": weights_digest(text),
        "resolution": model.captions.resolution,
        "precision": precision,
        "dtypes": [str(next(m.parameters()).dtype) for m in (vae, *text)],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cache_path(key: str) -> Path:
    """Where the encodings of ``key`` are kept."""
    return cache_root() / "latents" / f"{key}.safetensors"


class Encoded(torch.utils.data.Dataset):
    """One split's cached encodings: row ``i`` is a dict of tensors named as ``TextToImage.forward``
    takes them (``latent_mean``, ``latent_std``, ``context``, SDXL's ``pooled``)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors["latent_mean"])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i] for k, v in self.tensors.items()}


def collate(features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A batch of cached rows: each key's tensors stacked."""
    return {k: torch.stack([f[k] for f in features]) for k in features[0]}


def encode_all(
    model, prepared, device, precision: str, batch_size: int = 32
) -> dict[str, torch.Tensor]:
    """Every split's rows and the empty prompt through the frozen parts, as flat named tensors
    (``train.latent_mean``, ..., ``empty_context``), on the CPU."""
    where = device.torch_device
    model.to(where)  # the Trainer moves the model there anyway
    model.eval()
    kind = device.backend.torch_device
    dtype = DTYPES.get(precision) if precision != "fp32" else None
    out: dict[str, list[torch.Tensor]] = {}
    # the same autocast the Trainer trains under, so the encodings are those a step would make
    with (
        torch.no_grad(),
        torch.autocast(kind, dtype=dtype or torch.bfloat16, enabled=dtype is not None),
    ):
        for split, ds in prepared.items():
            rows = ds.with_format("torch")
            for start in range(0, len(rows), batch_size):
                batch = rows[start : start + batch_size]
                enc = model.encode(
                    batch["pixel_values"].to(where),
                    batch["input_ids"].to(where),
                    batch["input_ids_2"].to(where) if "input_ids_2" in batch else None,
                )
                for k, v in enc.items():
                    out.setdefault(f"{split}.{k}", []).append(v.to("cpu"))
        empty = {k: v.to("cpu") for k, v in model.encode_empty().items()}
    return {**{k: torch.cat(v).contiguous() for k, v in out.items()}, **empty}


def write(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """safetensors, atomically: a killed process leaves no half-written cache."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read(path: Path, splits) -> dict[str, torch.Tensor] | None:
    """The cached tensors, or None if there are none (or they cannot be read: then rebuilt)."""
    if not path.exists():
        return None
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except Exception as e:  # another program's file, a disk error: encode again
        warnings.warn(
            f"latent cache {path} could not be read ({type(e).__name__}: {e}); encoding again",
            UserWarning,
            stacklevel=3,
        )
        return None
    needed = [f"{s}.{k}" for s in splits for k in ("latent_mean", "latent_std", "context")] + [
        "empty_context"
    ]
    return tensors if all(k in tensors for k in needed) else None


def cached(model, dspec, prepared, device, precision: str) -> tuple[dict[str, Encoded], dict]:
    """(split -> ``Encoded`` rows, info) for ``model`` trained on ``prepared``, from the cache
    or encoded now and written there; ``model.use_cache`` is told. ``info`` goes into the
    run's summary."""
    key = cache_key(model, dspec, prepared, precision)
    path = cache_path(key)
    t0 = time.perf_counter()
    tensors = read(path, prepared)
    hit = tensors is not None
    if tensors is None:
        tensors = encode_all(model, prepared, device, precision)
        write(
            tensors,
            path,
            {"format": str(FORMAT), "data": json.dumps(dspec.to_dict()), "precision": precision},
        )
    info = {
        "path": str(path),
        "key": key,
        "hit": hit,
        "build_s": None if hit else time.perf_counter() - t0,
        "rows": {s: len(ds) for s, ds in prepared.items()},
        "bytes": path.stat().st_size,
    }
    model.use_cache({k: v for k, v in tensors.items() if k.startswith("empty_")}, info)
    splits = {
        s: Encoded({k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"{s}.")})
        for s in prepared
    }
    return splits, info
