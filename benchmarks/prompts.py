"""Does a text-to-image model draw what the prompt says? Digits-prompt accuracy, offline.

    python -m benchmarks prompts --json prompts.json
    python -m benchmarks prompts --run runs/RUN --per-digit 2 --sample-steps 10 --json
    prompts.json

Trains the tiny VAE, then tiny Stable Diffusion on its latents (``digits-captioned``),
samples ``per_digit`` images for each prompt "a handwritten N" and lets a classifier trained
on the real digits (scikit-learn's SVC on the 8x8 originals) read each sample, downsampled
to 8x8 by averaging 4x4 blocks. Accuracy: how often a sample for N is read as N (chance:
10%). The classifier's own accuracy on held-out real digits is reported beside it: it is
the ceiling of what this reader can tell. ``--run RUN_DIR`` scores a run already trained
(its last checkpoint, sampled where it loads: the CPU) instead of training one.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.registry import device as pick
from workbench.catalog.modelspec import model as as_model
from workbench.data.bundled import DIGIT_WORDS, caption
from workbench.data.dataset import dataset as as_dataset
from workbench.training.engine import Run, train

CHANCE = 0.1


def reader(seed: int = 0):
    """(classifier of 8x8 digits with values 0..16, its accuracy on a held-out fifth)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from sklearn.svm import SVC
    except ImportError:
        raise ImportError(
            "the prompt-accuracy reader needs scikit-learn: pip install "
            "'gaudi-workbench[diffusion]'"
        ) from None
    d = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        d.data, d.target, test_size=0.2, random_state=seed, stratify=d.target
    )
    held_out = float(SVC(gamma=0.001).fit(x_train, y_train).score(x_test, y_test))
    return SVC(gamma=0.001).fit(d.data, d.target), held_out


def as_digits(images) -> np.ndarray:
    """PIL samples (32x32) as rows of 64 values 0..16, as the reader's training digits are."""
    grey = np.stack([np.asarray(im.convert("L"), dtype=np.float32) for im in images])
    n, h, w = grey.shape
    small = grey.reshape(n, 8, h // 8, 8, w // 8).mean(axis=(2, 4))  # 4x4 blocks -> 8x8
    return (small * 16.0 / 255.0).reshape(n, 64)


def prompt_accuracy(
    run, per_digit: int = 10, steps: int = 25, guidance: float = 7.5, seed: int = 0
) -> dict[str, Any]:
    """How often ``run``'s samples for "a handwritten N" are read as N, per digit and overall."""
    clf, held_out = reader()
    per, confusion = {}, np.zeros((10, 10), dtype=int)
    for digit in range(10):
        images = run.sample(
            [caption(digit)] * per_digit, steps=steps, guidance=guidance, seed=seed + digit
        )
        read = clf.predict(as_digits(images))
        per[DIGIT_WORDS[digit]] = float((read == digit).mean())
        for r in read:
            confusion[digit, r] += 1
    return {
        "accuracy": float(np.mean(list(per.values()))),
        "per_digit": per,
        "reader_accuracy": held_out,
        "confusion": confusion.tolist(),
        "chance": CHANCE,
    }


def scored(
    path: str | Path,
    per_digit: int = 20,
    sample_steps: int = 25,
    guidance: float = 7.5,
    seed: int = 0,
) -> dict[str, Any]:
    """The digits-prompt accuracy of a text-to-image run already trained, read from its
    directory."""
    run = Run.open(path)
    if run.task != "text_to_image":
        raise ValueError(
            f"{run.name} is a {run.task} run; the prompts benchmark scores text-to-image runs"
        )
    score = prompt_accuracy(
        run, per_digit=per_digit, steps=sample_steps, guidance=guidance, seed=seed
    )
    dev = pick(next(run.model.parameters()).device.type)  # where its checkpoint loaded and sampled
    return {
        "bench": "prompts",
        "device": dev.to_dict(),
        "precision": run.spec.args.precision,
        "config": {
            "run": str(run.path),
            "steps": run.step,
            "per_digit": per_digit,
            "sample_steps": sample_steps,
            "guidance": guidance,
            "seed": seed,
        },
        "results": {run.name: {**score, "run": str(run.path)}},
        "figures": {"accuracy": score["accuracy"], "chance": CHANCE},
        "ratios": {"accuracy_vs_chance": score["accuracy"] / CHANCE},
    }


def run(
    steps: int = 1500,
    repeats: int = 1,
    batch_size: int = 16,
    device: str = "auto",
    vae_steps: int = 400,
    per_digit: int = 20,
    sample_steps: int = 25,
    guidance: float = 7.5,
    run_dir: str | Path | None = None,
    run: str | Path | None = None,
) -> dict[str, Any]:
    """Train the tiny VAE and tiny SD (``steps``), then measure the digits-prompt accuracy;
    with ``run`` (a run directory), measure that text-to-image run instead and train nothing."""
    if run is not None:
        return scored(run, per_digit=per_digit, sample_steps=sample_steps, guidance=guidance)
    dev = pick(device)
    data = as_dataset("digits-captioned")
    results, times = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(run_dir or tmp)
        for r in range(repeats):
            t0 = time.perf_counter()
            vae = train(
                as_model("vae"),
                data,
                max_steps=vae_steps,
                batch_size=batch_size,
                lr=2e-3,
                seed=r,
                device=dev.kind,
                live=False,
                run_dir=root,
            )
            sd = train(
                as_model("sd", vae=vae, snr_gamma=5.0),
                data,
                max_steps=steps,
                batch_size=batch_size,
                lr=1e-3,
                seed=r,
                device=dev.kind,
                live=False,
                run_dir=root,
            )
            times[f"round_{r}"] = time.perf_counter() - t0
            score = prompt_accuracy(
                sd, per_digit=per_digit, steps=sample_steps, guidance=guidance, seed=r
            )
            results[f"round_{r}"] = {
                "accuracy": score["accuracy"],
                "reader_accuracy": score["reader_accuracy"],
                "vae_loss": vae.summary["train_loss"],
                "sd_loss": sd.summary["train_loss"],
                "train_s": times[f"round_{r}"],
                "per_digit": score["per_digit"],
                "confusion": score["confusion"],
                "run": str(sd.path),
            }
    accuracy = float(np.median([v["accuracy"] for v in results.values()]))
    return {
        "bench": "prompts",
        "device": dev.to_dict(),
        "precision": "auto",
        "config": {
            "steps": steps,
            "vae_steps": vae_steps,
            "batch_size": batch_size,
            "per_digit": per_digit,
            "sample_steps": sample_steps,
            "guidance": guidance,
            "repeats": repeats,
        },
        "results": results,
        "figures": {"accuracy": accuracy, "chance": CHANCE},
        "ratios": {"accuracy_vs_chance": accuracy / CHANCE},
    }
