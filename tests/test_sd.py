"""Stable Diffusion (issue #19): captioned image data, the sd family, training (full and LoRA),
resume after SIGKILL, sampling; offline, with tiny parts from small configs."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.data import bundled
from workbench.diffusion.denoising import grid
from workbench.diffusion.texttoimage import TextToImage, from_spec
from workbench.training.engine import Run

pytest.importorskip("diffusers")
PROMPTS = ["a handwritten seven", "a handwritten one"]


pytestmark = pytest.mark.usefixtures("runs_in_tmp")


@pytest.fixture(scope="module")
def captions():
    return wb.model("sd").build()[1]


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------- data
def test_digits_captioned_names_each_digit_and_prepares_for_the_model(captions):
    spec = wb.dataset("digits-captioned", limit=40)
    assert spec.task == "text_to_image" and spec.columns == {"image": "image", "caption": "caption"}
    rows = spec.load()["train"]
    words = dict(enumerate(bundled.DIGIT_WORDS))
    assert all(c == f"a handwritten {words[label]}" for c, label in zip(rows["caption"], rows["label"]))
    prepared = spec.prepare(captions)["train"].with_format("numpy")[:]
    pixels, ids = prepared["pixel_values"], prepared["input_ids"]
    assert pixels.shape == (36, 3, 32, 32) and pixels.min() >= -1 and pixels.max() <= 1
    assert (pixels[:, 0] == pixels[:, 1]).all(), "grey digits become RGB with equal channels"
    assert ids.shape == (36, captions.caption_length)
    tok = captions.tokenizers[0]
    assert tok.decode(ids[0], skip_special_tokens=True).strip() == rows["caption"][0]


def _png(w: int, h: int, value: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (value, 0, 255 - value)).save(buf, format="PNG")
    return buf.getvalue()


def test_an_image_folder_and_a_parquet_table_of_image_bytes_load_as_captioned_images(tmp_path, captions):
    folder = tmp_path / "folder"
    folder.mkdir()
    meta = []
    for i in range(12):
        (folder / f"{i}.png").write_bytes(_png(64, 48, i * 20))  # not square: resized, centre-cropped
        meta.append({"file_name": f"{i}.png", "text": f"picture {i}"})
    (folder / "metadata.jsonl").write_text("\n".join(json.dumps(m) for m in meta))
    spec = wb.dataset(str(folder))
    assert spec.task == "text_to_image" and spec.columns == {"image": "image", "caption": "text"}
    x = spec.prepare(captions)["train"].with_format("numpy")[:]["pixel_values"]
    assert x.shape[1:] == (3, 32, 32)

    import pandas as pd

    table = tmp_path / "t.parquet"
    pd.DataFrame({"img": [{"bytes": _png(32, 32, i), "path": None} for i in range(12)],
                  "prompt": [f"p{i}" for i in range(12)]}).to_parquet(table)
    spec = wb.dataset(str(table), image="img", caption="prompt")
    assert spec.task == "text_to_image"
    x = spec.prepare(captions)["train"].with_format("numpy")[:]["pixel_values"]
    assert x.shape[1:] == (3, 32, 32) and x[:, 0].max() > x[:, 0].min(), "decoded, not blank"


def test_a_missing_caption_column_names_the_argument_and_the_fix(tmp_path):
    import pandas as pd

    table = tmp_path / "t.parquet"
    pd.DataFrame({"img": [{"bytes": _png(8, 8, i), "path": None} for i in range(4)],
                  "words": ["a"] * 4}).to_parquet(table)
    with pytest.raises(ValueError, match=r"needs a 'caption' column; columns found: img, words\. Pass caption="):
        wb.dataset(str(table), image="img", task="text_to_image").load()
    with pytest.raises(ValueError, match=r"column 'nope' \(for caption\) is not in 'digits-captioned'.*Pass caption="):
        wb.dataset("digits-captioned", caption="nope").load()
    with pytest.raises(ValueError, match="unknown crop 'middle'; known: center, random"):
        wb.dataset("digits-captioned", crop="middle")


def test_random_crops_and_flips_keep_one_shape():
    from workbench.diffusion.images import Augment

    x = torch.arange(3 * 32 * 40, dtype=torch.float32).reshape(3, 32, 40)
    rows = [{"pixel_values": x.numpy(), "input_ids": [1, 2]} for _ in range(16)]
    torch.manual_seed(0)
    batch = Augment(32, crop="random", flip=True)(rows)
    assert batch["pixel_values"].shape == (16, 3, 32, 32) and batch["input_ids"].shape == (16, 2)
    firsts = {float(b[0, 0, 0]) for b in batch["pixel_values"]}
    assert len(firsts) > 2, "crops (and flips) differ between rows"


# ---------------------------------------------------------------- the family
def test_tiny_sd_is_a_few_million_parameters_counted_offline():
    spec = wb.model("sd")
    assert spec.task == "text_to_image" and spec.size == "tiny"
    parts, captions = spec.build()
    built = sum(_params(m) for m in (parts.text_encoder, parts.vae, parts.unet))
    assert spec.num_params == built and 1_000_000 < built < 5_000_000
    assert captions.resolution == 32 and captions.caption_length == 16
    assert wb.model("sd", snr_gamma=5.0).to_dict() == json.loads(json.dumps(wb.model("sd", snr_gamma=5.0).to_dict()))


@pytest.mark.parametrize("size, params", [
    ("sd15", 123_060_480 + 83_653_863 + 859_520_964),       # CLIP ViT-L text, VAE, UNet
    ("sd21-base", 340_387_840 + 83_653_863 + 865_910_724),  # OpenCLIP ViT-H text (23 layers)
    ("sdxl", 123_060_480 + 694_659_840 + 83_653_863 + 2_567_463_684),
])
def test_named_sizes_are_hub_ids_sized_offline(size, params):
    spec = wb.model("sd", size=size)
    assert "/" in spec.source and spec.num_params == params


def test_bad_options_are_refused_with_the_valid_ones():
    with pytest.raises(TypeError, match="unknown Stable Diffusion option 'gamma'; options: prediction_type"):
        wb.model("sd", gamma=5)
    with pytest.raises(ValueError, match="prediction_type='x0'"):
        wb.model("sd", prediction_type="x0")
    with pytest.raises(ValueError, match="caption_dropout=1"):
        wb.model("sd", caption_dropout=1)
    with pytest.raises(TypeError, match=r"unet= takes a dict"):
        wb.model("sd", unet=3)


def test_parts_load_from_a_local_diffusers_directory_as_a_custom_or_an_sd15_spec(tmp_path):
    parts, _ = wb.model("sd").build()
    parts.save(tmp_path / "pipe")
    assert (tmp_path / "pipe" / "model_index.json").exists()
    assert list((tmp_path / "pipe" / "unet").glob("*.safetensors")) and not list((tmp_path / "pipe").rglob("*.bin"))
    for spec in (wb.model("sd", size=str(tmp_path / "pipe")),
                 dataclasses.replace(wb.model("sd", size="sd15"), source=str(tmp_path / "pipe"))):
        again, captions = spec.build()
        for name in ("text_encoder", "vae", "unet"):
            a, b = getattr(parts, name).state_dict(), getattr(again, name).state_dict()
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        assert captions.resolution == 32 and captions.caption_length == 16
    assert type(again.sampler).__name__ == "PNDMScheduler", "sd15 samples with its own scheduler"
    with pytest.raises(FileNotFoundError, match="has no model_index.json"):
        wb.model("sd", size=str(tmp_path / "pipe" / "unet"))


# A tiny SDXL: a second text encoder (with projection) and the UNet's size/crop conditioning
TINY_XL = {"text_encoder_2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                              "num_attention_heads": 2, "max_position_embeddings": 16, "projection_dim": 32},
           "unet": {"cross_attention_dim": 128, "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
                    "projection_class_embeddings_input_dim": 8 * 6 + 32}}


def test_an_sdxl_shaped_pipeline_trains_on_both_text_encoders_samples_and_reloads(tmp_path):
    model = from_spec(wb.model("sd", **TINY_XL))
    assert model.parts.is_xl and len(model.parts.captions.tokenizers) == 2
    rows = wb.dataset("digits-captioned", limit=20).prepare(model.parts.captions)["train"].select(range(4))
    assert "input_ids_2" in rows.column_names
    loss = model(**{k: torch.tensor(rows[k]) for k in rows.column_names})["loss"]
    loss.backward()
    assert torch.isfinite(loss) and model.unet.add_embedding.linear_1.weight.grad.abs().sum() > 0
    assert type(model.parts.pipeline()).__name__ == "StableDiffusionXLPipeline"
    assert model.sample(PROMPTS[0], steps=2)[0].size == (32, 32)
    model.parts.save(tmp_path / "xl")
    again, captions = wb.model("sd", size=str(tmp_path / "xl")).build()
    assert again.is_xl and len(captions.tokenizers) == 2
    assert torch.equal(again.text_encoder_2.text_projection.weight, model.parts.text_encoder_2.text_projection.weight)


# ---------------------------------------------------------------- the objective
def _batch(captions, n=4):
    tok = captions.tokenizers[0]
    ids = tok(PROMPTS * (n // 2), padding="max_length", max_length=tok.model_max_length, return_tensors="pt")
    torch.manual_seed(1)
    return torch.rand(n, 3, 32, 32) * 2 - 1, ids["input_ids"]


def _loss(model, x, ids, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        return float(model(x, ids)["loss"])


@pytest.mark.slow
def test_min_snr_weighting_noise_offset_and_v_prediction_change_the_loss_as_they_should():
    base = from_spec(wb.model("sd", caption_dropout=0.0))
    x, ids = _batch(base.parts.captions, n=64)  # 64 timesteps: some with SNR above 5
    plain = _loss(base, x, ids)
    base.snr_gamma = 1e12  # min(SNR, gamma) / SNR == 1 at every timestep
    assert _loss(base, x, ids) == pytest.approx(plain, rel=1e-6)
    base.snr_gamma = 5.0  # weights at most 1, below 1 where SNR > 5 (the least noisy steps)
    assert _loss(base, x, ids) < plain * 0.999
    base.snr_gamma, base.noise_offset = None, 0.1  # a per-channel shift of the noise: another target
    shifted = _loss(base, x, ids)
    assert shifted != pytest.approx(plain, rel=1e-4) and shifted == pytest.approx(_loss(base, x, ids))
    v = TextToImage(wb.model("sd").build()[0], prediction_type="v_prediction", caption_dropout=0.0)
    assert v.parts.sampler.config.prediction_type == "v_prediction", "the sampler predicts what the UNet learns"
    assert torch.isfinite(v(x, ids)["loss"])


def test_caption_dropout_swaps_in_the_empty_prompt_while_training_only():
    model = from_spec(wb.model("sd", caption_dropout=0.5))
    x, ids = _batch(model.parts.captions, n=64)
    empty = model.empty_ids_0
    torch.manual_seed(0)
    (dropped,) = model._drop_captions([ids])
    n = int((dropped == empty).all(dim=1).sum())
    assert 16 < n < 48, n
    model.eval()
    assert torch.equal(model._drop_captions([ids])[0], ids)


def test_the_frozen_parts_stay_frozen_in_eval_mode_and_the_runs_precision():
    model = from_spec(wb.model("sd"), precision="bf16")
    model.train()
    assert not model.vae.training and not model.text_encoder.training and model.unet.training
    assert next(model.vae.parameters()).dtype == torch.bfloat16
    assert next(model.unet.parameters()).dtype == torch.float32
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"unet"}


# ---------------------------------------------------------------- runs
@pytest.mark.slow
def test_tiny_sd_trains_and_samples_the_same_images_for_a_seed():
    run = wb.train(wb.model("sd"), wb.dataset("digits-captioned", limit=96), max_steps=6, batch_size=8,
                   log_every=2, live=False)
    assert run.status == "completed", run.summary.get("error")
    losses = [e["loss"] for e in run.events if e["phase"] in ("warmup", "train")]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(v)) for v in losses)
    assert any(e["phase"] == "eval" and "eval_loss" in e for e in run.events)
    assert (run.last_checkpoint / "model.safetensors").exists() and not list(run.path.rglob("*model*.bin"))
    images = run.sample(PROMPTS, steps=4, guidance=7.5, seed=3)
    assert [im.size for im in images] == [(32, 32)] * 2 and images[0].mode == "RGB"
    again = Run.open(run.path).sample(PROMPTS, steps=4, guidance=7.5, seed=3)
    assert [a.tobytes() for a in images] == [b.tobytes() for b in again], "same seed, same images"
    other = run.sample(PROMPTS, steps=4, guidance=7.5, seed=4)
    assert [a.tobytes() for a in images] != [b.tobytes() for b in other]
    with pytest.raises(ValueError, match="pass a prompt or a list of prompts"):
        run.sample([3])


# ---------------------------------------------------------------- sample grids during training
def _grid(event):
    """A samples event's grid, decoded."""
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(event["image"])))


def test_sample_options_are_checked_before_anything_is_written(tmp_path):
    data = wb.dataset("digits-captioned", limit=32)
    cases = [({"sample_prompts": [3]}, r"sample_prompts=\[3\]: pass a list of prompts \(strings\)"),
             ({"sample_prompts": PROMPTS, "sample_every": 0}, "sample_every=0: it must be a whole number"),
             ({"sample_prompts": PROMPTS, "sample_steps": 0}, "sample_steps=0: it must be a whole number")]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            wb.train(wb.model("sd"), data, max_steps=1, live=False, **kw)
    with pytest.raises(ValueError, match="sample_prompts is for text-to-image runs.*leave sample_prompts out"):
        wb.train(wb.model("unet"), wb.dataset("digits"), max_steps=1, live=False, sample_prompts=PROMPTS)
    assert not list((tmp_path / "runs").glob("*")), "refused before a run directory was made"


class _Log:
    def __init__(self):
        self.events = []

    def emit(self, event):
        self.events.append(event)


def test_a_grid_is_sampled_on_the_main_process_in_train_mode_left_as_it_was():
    from types import SimpleNamespace

    from workbench.backends.registry import device
    from workbench.training.callbacks import Samples

    model = from_spec(wb.model("sd"))
    model.train()
    log, paused = _Log(), []
    samples = Samples(log, PROMPTS, every=2, steps=2, seed=0, device=device("cpu"), exclude=paused.append)
    control = SimpleNamespace(should_training_stop=False)
    rng = torch.get_rng_state()
    for step, zero in [(1, True), (2, False), (2, True), (3, True)]:
        state = SimpleNamespace(global_step=step, max_steps=10, is_world_process_zero=zero)
        samples.on_step_end(None, state, control, model=model)
    assert [e["step"] for e in log.events] == [2], "every 2nd step, and on the main process only"
    assert model.training and not model.vae.training, "train mode restored, the frozen parts left in eval"
    assert torch.equal(torch.get_rng_state(), rng), "the global random state is left as it was"
    assert len(paused) == 1 and paused[0] > 0, "the time spent sampling leaves the throughput"
    event = log.events[0]
    assert event["phase"] == "samples" and event["prompts"] == PROMPTS and event["columns"] == 2
    expected = model.sample(PROMPTS, steps=2, seed=0)
    assert _grid(event).tobytes() == grid(expected, columns=2).tobytes(), "the model's own sample() path"
    state = SimpleNamespace(global_step=3, max_steps=3, is_world_process_zero=True)
    samples.on_step_end(None, state, control, model=model)
    assert [e["step"] for e in log.events] == [2, 3], "the last step always gets a grid"


@pytest.mark.slow
def test_sample_grids_come_at_the_asked_steps_and_leave_the_losses_as_they_were():
    data = wb.dataset("digits-captioned", limit=64)
    prompts = ["a handwritten seven", "a handwritten one", "a handwritten two"]
    args = {"max_steps": 5, "batch_size": 8, "log_every": 1, "live": False, "seed": 3}
    run = wb.train(wb.model("sd"), data, **args, sample_prompts=prompts, sample_every=2, sample_steps=2)
    plain = wb.train(wb.model("sd"), data, **args)
    assert run.status == plain.status == "completed", run.summary.get("error")
    grids = [e for e in run.events if e["phase"] == "samples"]
    assert [e["step"] for e in grids] == [2, 4, 5], "every 2nd step and the last"
    assert all(e["prompts"] == prompts and e["time"] >= 0 for e in grids)
    png = base64.b64decode(grids[-1]["image"])
    assert png.startswith(b"\x89PNG") and _grid(grids[-1]).size == (3 * 32, 32), "a thumbnail a prompt, 32x32"
    assert len(png) < 3 * 32 * 32 * 3 + 1024, f"{len(png)} bytes: one small PNG, at most its raw pixels"
    final = run.sample(prompts, steps=2, seed=3)  # the run's seed and the last step's weights
    assert _grid(grids[-1]).convert("RGB").tobytes() == grid(final, columns=3).tobytes()
    assert grids[0]["image"] != grids[-1]["image"], "the grid follows training"

    def losses(r):
        return [(e["step"], e.get("loss"), e.get("eval_loss")) for e in r.events if e["phase"] in ("warmup", "train", "eval")]

    assert losses(run) == losses(plain), "sampling changes no loss"
    assert not any(e["phase"] == "samples" for e in plain.events), "no prompts, no grids"


@pytest.mark.slow
def test_lora_trains_only_the_adapters_on_the_unets_attention():
    spec = wb.model("sd", lora={"r": 4})
    run = wb.train(spec, wb.dataset("digits-captioned", limit=64), max_steps=4, batch_size=8, lr=1e-2,
                   log_every=2, live=False)
    assert run.status == "completed", run.summary.get("error")
    model = run.model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n and n.startswith("unet.") for n in trainable)
    assert any("attn1.to_q.lora_A" in n for n in trainable)
    lora = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad)
    assert lora < 0.1 * _params(model.unet)
    reloaded = Run.open(run.path).model  # base + adapters from the checkpoint
    a, b = model.state_dict(), reloaded.state_dict()
    assert all(torch.equal(a[k].cpu(), b[k]) for k in a)
    assert any(a[k].abs().sum() > 0 for k in a if ".lora_B" in k), "LoRA's B starts at zero and trained"
    assert len(run.sample(PROMPTS[:1], steps=2)) == 1


@pytest.mark.slow
def test_a_lora_run_resumes_with_its_adapters_and_its_random_base():
    run = wb.train(wb.model("sd", lora=True), wb.dataset("digits-captioned", limit=64), max_steps=2, batch_size=8,
                   save_every=2, log_every=1, lr=1e-2, live=False)
    before = {k: v.clone() for k, v in Run.open(run.path).model.state_dict().items()}
    run.resume(max_steps=4, live=False)
    assert run.status == "completed" and run.summary["step"] == 4
    after = Run.open(run.path).model.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved and all(".lora_" in k for k in moved), "the base stays as it was saved; the adapters train on"


def test_a_hub_pipeline_offline_says_so_and_how_to_use_a_local_directory():
    with pytest.raises(RuntimeError, match=r"(?s)'stable-diffusion-v1-5/stable-diffusion-v1-5'.*HF_HUB_OFFLINE.*size=DIR"):
        wb.model("sd", size="sd15").build()


@pytest.mark.slow
def test_an_ema_of_the_unet_is_kept_saved_and_sampled_from():
    with pytest.raises(ValueError, match="ema=1.5: the EMA decay"):
        wb.model("sd", ema=1.5)
    run = wb.train(wb.model("sd", ema=0.5), wb.dataset("digits-captioned", limit=64), max_steps=4, batch_size=8,
                   lr=1e-2, live=False)
    assert run.status == "completed", run.summary.get("error")
    model = Run.open(run.path).model
    assert float(model.ema_steps) == 4 and not any(p.requires_grad for p in model.ema_unet.parameters())
    ema, unet = model.ema_unet.state_dict(), model.unet.state_dict()
    assert any(not torch.equal(ema[k], unet[k]) for k in unet), "the average lags the trained weights"
    plain = TextToImage(model.parts, caption_dropout=0.0)  # the same parts, sampled without the EMA
    assert [a.tobytes() for a in model.sample(PROMPTS, steps=2)] != [b.tobytes() for b in plain.sample(PROMPTS, steps=2)]


VICTIM = textwrap.dedent("""
    import os, signal, sys
    import transformers
    import workbench as wb

    class KillAfterFirstSave(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kw):
            os.kill(os.getpid(), signal.SIGKILL)

    wb.train(wb.model("sd"), wb.dataset("digits-captioned", limit=64), max_steps=6, batch_size=8,
             save_every=2, log_every=2, name="victim", live=False, callbacks=[KillAfterFirstSave()])
""")


@pytest.mark.slow
def test_a_tiny_sd_run_killed_by_sigkill_resumes_from_its_checkpoint(tmp_path):
    proc = subprocess.run([sys.executable, "-c", VICTIM], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    assert run.status == "failed" and run.last_checkpoint.name == "checkpoint-2"
    run.resume(live=False)
    assert run.status == "completed" and run.summary["step"] == 6
    assert [e["step"] for e in run.events if e["phase"] in ("warmup", "train")] == [2, 4, 6]


# ---------------------------------------------------------------- the VAE
def test_vae_options_and_paths_are_checked_before_anything_is_written(tmp_path):
    assert wb.model("vae").num_params == _params(wb.model("vae").build()[0])
    with pytest.raises(TypeError, match="unknown VAE option 'beta'; options: vae"):
        wb.model("vae", beta=1)
    with pytest.raises(FileNotFoundError, match="neither a VAE run's directory"):
        wb.model("sd", vae=str(tmp_path))


@pytest.mark.slow
def test_a_tiny_vae_trains_and_sd_takes_it_with_its_latent_scale():
    run = wb.train(wb.model("vae"), wb.dataset("digits-captioned", limit=200), max_steps=24, batch_size=16,
                   lr=2e-3, log_every=4, live=False)
    assert run.status == "completed", run.summary.get("error")
    losses = [e["loss"] for e in run.events if e["phase"] in ("warmup", "train")]
    assert losses[-1] < 0.7 * losses[0], losses
    with pytest.raises(ValueError, match="reconstructs images, it does not sample"):
        run.sample(PROMPTS)
    from safetensors.torch import load_file

    saved = load_file(str(run.last_checkpoint / "model.safetensors"))
    spec = wb.model("sd", vae=run)
    assert spec.overrides["vae"] == str(run.path.resolve())
    assert wb.model("sd", vae=str(run.path)).to_dict() == json.loads(spec.to_json())
    model = from_spec(spec)
    vae = model.vae.state_dict()
    assert all(torch.equal(vae[k], saved[f"vae.{k}"]) for k in vae)
    assert float(saved["latent_std"]) > 0
    assert model.vae.config.scaling_factor == pytest.approx(1 / float(saved["latent_std"]))
    x, ids = _batch(model.captions)
    assert torch.isfinite(model(x, ids)["loss"])
    with pytest.raises(ValueError, match="is a sd run, not a VAE run"):
        sd = wb.train(wb.model("sd"), wb.dataset("digits-captioned", limit=32), max_steps=1, batch_size=8, live=False)
        wb.model("sd", vae=sd)


# ---------------------------------------------------------------- prompt accuracy
def test_the_digit_reader_reads_real_digits_back_from_32x32_rgb_images():
    """A generator that drew the real digits would score what the reader scores on them."""
    from PIL import Image

    from benchmarks.prompts import as_digits, reader

    clf, held_out = reader()
    assert held_out > 0.95
    rows = bundled.load("digits-captioned").select(range(300))
    images = [Image.fromarray(np.asarray(im, dtype=np.uint8)).convert("RGB") for im in rows["image"]]
    x = as_digits(images)
    assert x.shape == (300, 64) and 0 <= x.min() and x.max() <= 16
    assert (clf.predict(x) == np.asarray(rows["label"])).mean() > 0.95
    noise = [Image.fromarray(np.random.default_rng(i).integers(0, 255, (32, 32, 3), dtype=np.uint8)) for i in range(100)]
    assert (clf.predict(as_digits(noise)) == np.arange(100) % 10).mean() < 0.3, "noise is read at about chance"
