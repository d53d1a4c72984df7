"""The latent cache (issue #19): text-to-image training from encodings made once, offline,
with tiny Stable Diffusion parts."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers

import workbench as wb
from workbench.data.bundled import cache_dir
from workbench.diffusion.latentcache import cache_key
from workbench.diffusion.texttoimage import from_spec
from workbench.training.engine import Run

pytest.importorskip("diffusers")
TINY_XL = {"text_encoder_2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                              "num_attention_heads": 2, "max_position_embeddings": 16, "projection_dim": 32},
           "unet": {"cross_attention_dim": 128, "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
                    "projection_class_embeddings_input_dim": 8 * 6 + 32}}


pytestmark = pytest.mark.usefixtures("runs_in_tmp")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))  # every test builds its own cache


def test_cache_latents_is_refused_where_it_cannot_apply_before_anything_is_written(tmp_path):
    sd = wb.model("sd")
    with pytest.raises(ValueError, match=r"cache_latents=True cannot keep the latents of crop='random' and "
                                         r"flip=True.*crop='center', flip=False.*cache_latents=False"):
        wb.train(sd, wb.dataset("digits-captioned", limit=32, crop="random", flip=True), cache_latents=True,
                 max_steps=1, batch_size=8, live=False)
    with pytest.raises(ValueError, match=r"cannot keep the latents of flip=True"):
        wb.train(sd, wb.dataset("digits-captioned", limit=32, flip=True), cache_latents=True, max_steps=1,
                 batch_size=8, live=False)
    with pytest.raises(ValueError, match=r"cache_latents=True keeps a text-to-image model's.*leave cache_latents=False"):
        wb.train("bert-tiny", "docstrings-topic", cache_latents=True, max_steps=1, live=False)
    with pytest.raises(TypeError, match="cache_latents must be True or False, got 'yes'"):
        wb.train(sd, wb.dataset("digits-captioned", limit=32), cache_latents="yes", max_steps=1, live=False)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache" / "latents").exists()


@pytest.mark.parametrize("overrides", [{}, TINY_XL], ids=["sd", "sdxl"])
def test_cached_encodings_give_the_loss_images_give_for_a_seed(overrides):
    """Same latent draw, same caption dropout, same noise: the same loss (dropped captions included)."""
    model = from_spec(wb.model("sd", caption_dropout=0.5, **overrides))
    rows = wb.dataset("digits-captioned", limit=40).prepare(model.captions)["train"].with_format("torch")[:8]
    inputs = {k: rows[k] for k in ("pixel_values", "input_ids", "input_ids_2") if k in rows}
    model.train()
    encoded = model.encode(**inputs)
    assert ("pooled" in encoded) == bool(overrides)
    model.use_cache(model.encode_empty(), {"path": "nowhere"})
    losses = []
    for batch in (inputs, encoded):
        torch.manual_seed(3)
        losses.append(float(model(**batch)["loss"].detach()))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6, abs=0)
    torch.manual_seed(3)  # the same draw without the empty prompt: another loss, so dropout did swap it in
    model.empty_context = torch.zeros_like(model.empty_context)
    assert float(model(**encoded)["loss"].detach()) != pytest.approx(losses[1], rel=1e-4)


def test_a_changed_part_gives_another_cache_key():
    data = wb.dataset("digits-captioned", limit=40)
    model = from_spec(wb.model("sd"))
    prepared = data.prepare(model.captions)
    key = cache_key(model, data, prepared, "fp32")
    assert cache_key(model, data, prepared, "fp32") == key
    assert cache_key(model, data, prepared, "bf16") != key
    other = wb.dataset("digits-captioned", limit=48)
    assert cache_key(model, other, other.prepare(model.captions), "fp32") != key
    with torch.no_grad():
        model.vae.decoder.conv_out.bias.add_(1.0)  # the decoder makes no latent: same encodings
        assert cache_key(model, data, prepared, "fp32") == key
        model.vae.encoder.conv_in.bias.add_(1e-3)
        changed_vae = cache_key(model, data, prepared, "fp32")
        model.text_encoder.get_input_embeddings().weight.add_(1e-3)
        changed_text = cache_key(model, data, prepared, "fp32")
    assert len({key, changed_vae, changed_text}) == 3


class EncoderCalls(transformers.TrainerCallback):
    """Counts calls of the VAE encoder and the text encoder between the start and end of training."""

    def __init__(self):
        self.calls = {"vae_encoder": 0, "text_encoder": 0}
        self.hooks = []

    def _count(self, name):
        def hook(*_):
            self.calls[name] += 1
        return hook

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.hooks = [model.vae.encoder.register_forward_hook(self._count("vae_encoder")),
                      model.text_encoder.register_forward_hook(self._count("text_encoder"))]

    def on_train_end(self, args, state, control, **kw):
        for h in self.hooks:
            h.remove()


def _train(cache: bool, **kw):
    calls = EncoderCalls()
    run = wb.train(wb.model("sd"), wb.dataset("digits-captioned", limit=64), max_steps=3, batch_size=8,
                   log_every=1, live=False, cache_latents=cache, callbacks=[calls], **kw)
    assert run.status == "completed", run.summary.get("error")
    return run, calls.calls, [e["loss"] for e in run.events if e["phase"] in ("warmup", "train")]


@pytest.mark.slow
def test_a_cached_run_trains_as_an_uncached_one_without_running_either_encoder():
    plain, plain_calls, plain_losses = _train(False)
    assert plain_calls["vae_encoder"] >= 3 and plain_calls["text_encoder"] >= 3, "the hooks see the encoders run"
    assert "latent_cache" not in plain.summary
    cached, cached_calls, cached_losses = _train(True)
    assert cached_calls == {"vae_encoder": 0, "text_encoder": 0}
    assert cached_losses == pytest.approx(plain_losses, rel=1e-5) and len(cached_losses) == 3
    assert cached.summary["eval"]["loss"] == pytest.approx(plain.summary["eval"]["loss"], rel=1e-5)
    info = cached.summary["latent_cache"]
    path = Path(info["path"])
    assert info["hit"] is False and info["build_s"] > 0 and info["rows"] == {"train": 57, "eval": 7}
    assert path.parent == cache_dir() / "latents" and path.suffix == ".safetensors"
    written = path.stat().st_mtime_ns
    again, again_calls, again_losses = _train(True)
    assert again.summary["latent_cache"] == {**info, "hit": True, "build_s": None}
    assert path.stat().st_mtime_ns == written and again_losses == cached_losses
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file left behind"


VICTIM = textwrap.dedent("""
    import os, signal
    import transformers
    import workbench as wb

    class KillAfterFirstSave(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kw):
            os.kill(os.getpid(), signal.SIGKILL)

    wb.train(wb.model("sd", lora={"r": 4}), wb.dataset("digits-captioned", limit=64), max_steps=4, batch_size=8,
             save_every=2, log_every=2, name="victim", live=False, cache_latents=True,
             callbacks=[KillAfterFirstSave()])
""")


@pytest.mark.slow
def test_a_lora_run_from_the_cache_killed_by_sigkill_resumes_on_the_same_cache(tmp_path):
    proc = subprocess.run([sys.executable, "-c", VICTIM], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    (cache,) = (tmp_path / "cache" / "latents").iterdir()
    written = cache.stat().st_mtime_ns
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    assert run.status == "failed" and run.last_checkpoint.name == "checkpoint-2"
    calls = EncoderCalls()
    run.resume(live=False, callbacks=[calls])
    assert run.status == "completed" and run.summary["step"] == 4
    assert run.summary["latent_cache"]["hit"] is True and run.summary["latent_cache"]["path"] == str(cache)
    assert cache.stat().st_mtime_ns == written and calls.calls == {"vae_encoder": 0, "text_encoder": 0}
    trainable = [n for n, p in Run.open(path).model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)
