"""The engine uses the libraries' documented extension points and leaves the process as it
found it: a Trainer subclass for its batch sampler (no method assigned on an instance, no
field of accelerate's objects overwritten), ordinary TrainerCallback subclasses, torch
settings set for a run and restored after it, and a model freed once its run is dropped.
"""

from __future__ import annotations

import gc
import weakref

import pytest

import workbench as wb
from workbench.training import callbacks

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


@pytest.mark.slow
def test_a_bucketed_run_trains_through_a_trainer_subclass_with_its_own_batches():
    import transformers
    from accelerate.data_loader import BatchSamplerShard

    from workbench.training.loaders import BatchSamplerTrainer

    run = wb.train("bert-tiny", "docstrings-topic", max_steps=2, padding="bucketed", buckets=2,
                   batch_size=4, live=False)
    trainer = run.trainer
    assert type(trainer) is BatchSamplerTrainer and isinstance(trainer, transformers.Trainer)
    assert "get_train_dataloader" not in vars(trainer), "a method assigned on the instance"
    loader = trainer.get_train_dataloader()
    shard = loader.batch_sampler
    inner = shard.batch_sampler if isinstance(shard, BatchSamplerShard) else shard
    assert inner is trainer.batch_sampler  # the run's own bucket sampler, not re-sharded
    if isinstance(shard, BatchSamplerShard):  # one process: accelerate's shard is a pass-through
        assert (shard.num_processes, shard.process_index) == (1, 0)
    lengths = {len(b["input_ids"][0]) for b in loader}
    assert lengths <= set(inner.boundaries), f"batches of {lengths}, buckets {inner.boundaries}"
    assert run.status == "completed"


@pytest.mark.slow
def test_compiling_every_shape_runs_each_once_and_leaves_the_training_state():
    """The warm-up of a static-shape device (HPU: before step 1; called here on a CPU run's
    Trainer): one forward and backward per batch shape, then weights, gradients and the
    random state as they were (no optimizer step, gradients dropped, generator put back)."""
    import torch

    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, padding="bucketed", buckets=3,
                   batch_size=4, live=False)
    trainer = run.trainer
    model = trainer.model
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []
    hook = model.register_forward_hook(lambda m, args, out: seen.append(out.logits.shape))
    rng = torch.get_rng_state()
    try:
        ran = trainer.compile_every_shape(model, trainer.data_collator.inner)
    finally:
        hook.remove()
    lengths = [trainer.batch_sampler.length_of(b) for b in trainer.batch_sampler.one_per_shape()]
    assert ran == len(seen) == len(lengths) >= 2, (ran, seen, lengths)
    assert torch.equal(torch.get_rng_state(), rng), "the random state moved"
    assert all(p.grad is None for p in model.parameters()), "gradients left behind"
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items()), "weights moved"


def test_the_runs_callbacks_are_trainer_callback_subclasses():
    from transformers import TrainerCallback

    for cls in (callbacks.Events, callbacks.Samples, callbacks.DistStop, callbacks.MarkStep):
        assert issubclass(cls, TrainerCallback), cls
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, live=False)
    ours = [cb for cb in run.trainer.callback_handler.callbacks
            if type(cb).__module__ == "workbench.training.callbacks"]
    assert ours and all(type(cb) is getattr(callbacks, type(cb).__name__) for cb in ours), (
        "a callback's class is not the module's own class (swapped at run time)")


@pytest.mark.slow
def test_a_compiled_run_raises_dynamos_recompile_limit_for_the_run_only():
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before = getattr(config, name)
    seen = []

    class Watch(__import__("transformers").TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            seen.append(getattr(config, name))

    # dynamo with its "eager" backend: the run compiles (guards, recompile limit) without
    # generating code, so the test stays quick on a CPU
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=2, padding="bucketed", buckets=8,
                   batch_size=4, compile=True, torch_compile_backend="eager", live=False,
                   callbacks=[Watch()])
    assert run.status == "completed"
    assert seen and min(seen) >= 2 * 8 + 2 > before, (seen, before)
    assert getattr(config, name) == before, "the run left dynamo's limit raised"


def test_torch_settings_are_put_back_by_the_function_each_setter_returns():
    import torch

    from workbench.training import torchconfig

    sdp = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    restore = torchconfig.reduced_precision_sdp_math(not sdp)
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() is (not sdp)
    restore()
    assert torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed() is sdp
    config = torch._dynamo.config
    inline = config.inline_inbuilt_nn_modules
    restore = torchconfig.dynamo_settings(inline_inbuilt_nn_modules=not inline)
    assert config.inline_inbuilt_nn_modules is (not inline)
    restore()
    assert config.inline_inbuilt_nn_modules is inline
    with pytest.raises(ValueError, match="no setting 'no_such_field'"):
        torchconfig.dynamo_settings(no_such_field=1)


def test_the_model_of_a_run_is_freed_once_the_run_is_dropped():
    """A notebook that trains, then drops the run (``run = None``, or a new run in the same
    variable) gets the model's memory back: nothing in the workbench keeps it."""
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=2, live=False)
    model = weakref.ref(run.trainer.model)
    trainer = weakref.ref(run.trainer)
    assert model() is not None
    del run
    gc.collect()
    assert trainer() is None, f"the Trainer is still held by {_holders(trainer())}"
    assert model() is None, f"the model is still held by {_holders(model())}"


def _holders(obj) -> list[str]:
    return [type(r).__name__ for r in gc.get_referrers(obj)][:10] if obj is not None else []


@pytest.mark.slow
def test_two_ranks_each_train_their_own_share_of_the_bucketed_batches_once():
    """With two torchrun workers the bucket sampler hands each rank its share; the Trainer
    subclass prepares that loader without accelerate sharding it a second time: one epoch of
    64 rows in batches of 4 is 16 batches, 8 steps on each rank (4 if sharded twice)."""
    run = wb.launch("bert-tiny", wb.dataset("docstrings-topic", limit=64), devices=2,
                    padding="bucketed", buckets=2, batch_size=4, max_length=32, epochs=1,
                    live=False)
    assert run.status == "completed", run.summary.get("error")
    assert run.summary["world_size"] == 2
    assert run.summary["max_steps"] == run.summary["step"] == 8, run.summary
