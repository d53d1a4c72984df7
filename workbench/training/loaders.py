"""The Trainer of a run whose batches come from a batch sampler of its own (bucketed padding).

transformers' ``Trainer`` builds its training loader from a per-example sampler and has no
argument for a batch sampler; its documentation names subclassing ``get_train_dataloader``
as the way to "inject custom behavior" into data loading (``Trainer`` docstring and the
"Customize the Trainer" section of its guide). ``BatchSamplerTrainer`` does that and
nothing else: the loop, the optimizer and the callbacks stay the library's.
"""

from __future__ import annotations

import torch
import transformers
from accelerate.data_loader import prepare_data_loader


class BatchSamplerTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` that trains on ``batch_sampler``'s batches.

    ``batch_sampler`` yields lists of row indices (``shapes.BucketBatchSampler``). With
    several processes it already yields this rank's share (every rank the same number of
    batches), so the loader is prepared with accelerate's ``prepare_data_loader`` told that
    there is one process to serve, rather than by ``Accelerator.prepare``, which would wrap
    the sampler in a ``BatchSamplerShard`` and shard it a second time.
    """

    def __init__(self, *args, batch_sampler, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_sampler = batch_sampler

    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        args = self.args
        loader = torch.utils.data.DataLoader(
            self.train_dataset,
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
