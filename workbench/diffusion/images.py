"""Image data: image folders, decoding, resize and crop, captions to token ids, augmenting collator.

Every image is made RGB, its shorter side resized to the model's resolution and
(``crop="center"``) cut to a square; ``crop="random"`` and ``flip`` happen per batch in
``Augment``, so every epoch sees other crops while the shapes stay static.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

CROPS = ("center", "random")
METADATA = ("metadata.jsonl", "metadata.csv", "metadata.parquet")  # datasets' imagefolder captions


def is_folder(path: Path) -> bool:
    """Whether ``path`` is an image folder with a metadata file (datasets' imagefolder layout)."""
    return path.is_dir() and any((path / name).exists() for name in METADATA)


def read_folder(path: Path):
    """An image folder with ``metadata.jsonl``/``.csv`` (``file_name`` + caption columns) as a
    Dataset."""
    import datasets

    return datasets.load_dataset("imagefolder", data_dir=str(path), split="train")


def check_options(crop: str, flip: bool) -> None:
    """Refuse an unknown crop (before anything is read)."""
    if crop not in CROPS:
        raise ValueError(f"unknown crop {crop!r}; known: {', '.join(CROPS)}")
    if not isinstance(flip, bool):
        raise TypeError(f"flip must be True or False, got {flip!r}")


def decode(value):
    """A PIL RGB image from a PIL image, an encoded ``{"bytes": ...}`` row, bytes, or a pixel
    array."""
    from PIL import Image

    if isinstance(value, dict):
        value = value.get("bytes") or Image.open(value["path"])
    if isinstance(value, (bytes, bytearray)):
        value = Image.open(io.BytesIO(value))
    if not isinstance(value, Image.Image):
        value = Image.fromarray(np.asarray(value, dtype=np.uint8))
    return value.convert("RGB")


def fit(image, resolution: int, crop: str = "center") -> np.ndarray:
    """(3, H, W) float32 in [-1, 1]: the shorter side resized to ``resolution``, centre-cropped to a
    square unless ``crop="random"`` (then ``Augment`` crops each batch)."""
    from PIL import Image

    w, h = image.size
    if min(w, h) != resolution:
        scale = resolution / min(w, h)
        image = image.resize(
            (max(resolution, round(w * scale)), max(resolution, round(h * scale))),
            Image.Resampling.BILINEAR,
        )
        w, h = image.size
    if crop == "center":
        left, top = (w - resolution) // 2, (h - resolution) // 2
        image = image.crop((left, top, left + resolution, top + resolution))
    x = np.asarray(image, dtype=np.float32).transpose(2, 0, 1)
    return x / 127.5 - 1.0


def captioned(columns: dict[str, str], captions, crop: str = "center"):
    """The batched ``map`` function: images to ``pixel_values``, captions to ``input_ids`` (and
    ``input_ids_2`` for a second tokenizer), each padded to the fixed caption length."""
    if not hasattr(captions, "resolution"):
        raise ValueError(
            "captioned images are prepared for a model: spec.prepare(wb.model('sd').build()[1])"
        )
    image_col, caption_col = columns["image"], columns["caption"]

    def fn(batch):
        out = {
            "pixel_values": [fit(decode(v), captions.resolution, crop) for v in batch[image_col]]
        }
        text = [c if isinstance(c, str) else "" for c in batch[caption_col]]
        for i, tok in enumerate(captions.tokenizers):
            ids = tok(text, padding="max_length", max_length=tok.model_max_length, truncation=True)[
                "input_ids"
            ]
            out["input_ids" if i == 0 else f"input_ids_{i + 1}"] = ids
        return out

    return fn


def signature(captions) -> list:
    """What the prepared rows depend on besides the data: the tokenizers, the resolution."""
    return [
        [(t.name_or_path, len(t), t.model_max_length) for t in captions.tokenizers],
        captions.resolution,
    ]


def pixels(column: str):
    """The batched ``map`` function of unconditional diffusion: pixel arrays to [-1, 1], channels
    first."""

    def fn(batch):
        x = np.asarray(batch[column], dtype=np.float32)
        if x.ndim == 3:  # (batch, h, w) grey -> (batch, 1, h, w)
            x = x[:, None]
        elif x.ndim == 4 and x.shape[-1] in (1, 3):  # channels last -> first
            x = x.transpose(0, 3, 1, 2)
        return {"pixel_values": x / 127.5 - 1.0}

    return fn


class Augment:
    """Collates captioned images with a random square crop and/or horizontal flip, drawn from
    the dataloader's torch RNG (seeded by the Trainer: a resumed run draws as the original)."""

    def __init__(self, resolution: int, crop: str = "center", flip: bool = False):
        self.resolution, self.crop, self.flip = resolution, crop, flip

    def __call__(self, features):
        import torch

        r, rows = self.resolution, []
        for f in features:
            x = torch.as_tensor(np.asarray(f["pixel_values"], dtype=np.float32))
            if self.crop == "random":
                top = int(torch.randint(0, x.shape[1] - r + 1, ()))
                left = int(torch.randint(0, x.shape[2] - r + 1, ()))
                x = x[:, top : top + r, left : left + r]
            if self.flip and bool(torch.rand(()) < 0.5):
                x = x.flip(-1)
            rows.append(x)
        batch = {"pixel_values": torch.stack(rows)}
        for key in features[0]:
            if key.startswith("input_ids"):
                batch[key] = torch.tensor([f[key] for f in features])
        return batch
