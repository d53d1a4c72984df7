"""The Trainer of a run whose batches come from a batch sampler of its own (bucketed padding),
through ``get_train_dataloader`` and ``training_step``, which transformers documents for
subclassing: the loop, the optimizer and the callbacks stay the library's.
"""

from __future__ import annotations

from typing import cast

import torch
import transformers
from accelerate.data_loader import prepare_data_loader
from accelerate.utils import send_to_device


class BatchSamplerTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that trains on ``batch_sampler``'s batches.

    The sampler yields this rank's share already, so the loader goes through accelerate's
    ``prepare_data_loader`` for one process, not ``Accelerator.prepare`` (which would shard it
    again).
    """

    def __init__(self, *args, batch_sampler, warmup_collator=None, mark_step=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_sampler = batch_sampler
        # the collator of the warm-up batches (the run's own, not the counting one), or None
        self._warmup = warmup_collator
        self._mark_step = mark_step or (lambda: None)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The library's step; before the first one, ``compile_every_shape`` (once)."""
        if self._warmup is not None:
            collate, self._warmup = self._warmup, None
            self.compile_every_shape(model, collate)
        return super().training_step(model, inputs, num_items_in_batch)

    def compile_every_shape(self, model, collate) -> int:
        """Compile the graph of every batch shape before the first step, as vllm-gaudi warms up
        its buckets: forward, backward and gradient clipping once per shape through
        ``training_step``, then ``mark_step``; gradients and random state put back, no
        optimizer step. Skipped under DeepSpeed and FSDP and for models with running
        statistics. Returns the number of batches run."""
        if (
            self.is_deepspeed_enabled
            or self.is_fsdp_enabled
            or any(getattr(m, "running_mean", None) is not None for m in model.modules())
        ):
            return 0
        batches = self.batch_sampler.one_per_shape()
        device, args = self.args.device, self.args
        where = getattr(torch, device.type, None) if device.type != "cpu" else None
        keep = where.get_rng_state() if where and hasattr(where, "get_rng_state") else None
        assert self.train_dataset is not None  # the batch sampler indexes it
        with torch.random.fork_rng(devices=[]):  # the host's generator (dropout on the host)
            self._mark_step()  # what setting up left queued: a graph of its own
            tally = torch.zeros((), device=device)  # as the loop's loss tally
            self._mark_step()
            for rows in batches:
                # on the device first, as the loader hands it over: the loop counts the
                # batch's labels there (get_batch_samples), inside the step's graph
                batch = send_to_device(collate([self.train_dataset[i] for i in rows]), device)
                _, items = self.get_batch_samples(iter([batch]), 1, device)
                tally += super().training_step(model, cast(dict, batch), items)
                norm = args.max_grad_norm if args.max_grad_norm > 0 else float("inf")
                self.accelerator.clip_grad_norm_(model.parameters(), norm)
                self._mark_step()
                model.zero_grad()
        if where is not None and keep is not None:
            where.set_rng_state(keep)
        return len(batches)

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        args = self.args
        loader = torch.utils.data.DataLoader(
            self.train_dataset,  # pyright: ignore[reportArgumentType]  # a datasets.Dataset is map-style
            batch_sampler=self.batch_sampler,
            collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
        )
        if self.accelerator.num_processes == 1:
            return self.accelerator.prepare(loader)
        # accelerate's documented function, with the values Accelerator.prepare would give
        # it but for the process count: the batches are this rank's already. No generator
        # to synchronise across ranks: the sampler's order depends only on (seed, epoch).
        return prepare_data_loader(
            loader,
            self.accelerator.device,
            num_processes=1,
            process_index=0,
            put_on_device=self.accelerator.device_placement,
            non_blocking=self.accelerator.non_blocking,
        )
