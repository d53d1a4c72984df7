"""What ``**options`` takes in ``wb.train``, ``wb.launch``, ``wb.launch_command`` and
``wb.profile`` (``RunOptions``): the run's arguments, with ``runargs.RunArgs``' types, and the
fields of the installed ``transformers.TrainingArguments`` (``TrainerOverrides``), with its
types, so that a type checker flags a misspelt keyword (``bach_size=8``) and checks each value.

A stub only (nothing imports it at run time: the doors' annotations are never evaluated). Left
out of ``TrainerOverrides``: the run's own arguments (``max_steps``, ``seed``, ``report_to``:
``RunOptions`` types them) and the names every door refuses (``runargs.REFUSED``,
``resume_from_checkpoint``). The aliases (``learning_rate`` for ``lr``, ...) stay: the doors
take them. tests/test_overrides.py holds this list, and each type, equal to
``dataclasses.fields(transformers.TrainingArguments)``, and ``RunOptions``' own names and types
equal to ``RunArgs``' (in ``wb.train``'s order).
"""

from pathlib import Path
from typing import Any, Literal, TypedDict

from accelerate.parallelism_config import ParallelismConfig
from transformers.debug_utils import DebugOption
from transformers.trainer_utils import HubStrategy, IntervalStrategy, SaveStrategy, SchedulerType
from transformers.training_args import OptimizerNames

class TrainerOverrides(TypedDict, total=False):
    per_device_train_batch_size: int
    num_train_epochs: float
    learning_rate: float
    lr_scheduler_type: SchedulerType | str
    lr_scheduler_kwargs: dict | str | None
    warmup_steps: float
    optim: OptimizerNames | str
    optim_args: str | None
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    optim_target_modules: None | str | list[str]
    gradient_accumulation_steps: int
    average_tokens_across_devices: bool
    max_grad_norm: float
    label_smoothing_factor: float
    bf16: bool
    fp16: bool
    bf16_full_eval: bool
    fp16_full_eval: bool
    tf32: bool | None
    activation_checkpointing: bool | None
    activation_checkpointing_kwargs: dict[str, Any] | str | None
    gradient_checkpointing: bool | None
    gradient_checkpointing_kwargs: dict[str, Any] | str | None
    torch_compile: bool
    torch_compile_backend: str | None
    torch_compile_mode: str | None
    use_liger_kernel: bool
    liger_kernel_config: dict[str, bool] | None
    use_cache: bool
    neftune_noise_alpha: float | None
    torch_empty_cache_steps: int | None
    auto_find_batch_size: bool
    logging_strategy: IntervalStrategy | str
    logging_steps: float
    logging_first_step: bool
    log_on_each_node: bool
    logging_nan_inf_filter: bool
    include_num_input_tokens_seen: str | bool
    log_level: str
    log_level_replica: str
    disable_tqdm: bool | None
    run_name: str | None
    project: str
    trackio_space_id: str | None
    trackio_bucket_id: str | None
    trackio_static_space_id: str | Literal[False] | None
    eval_strategy: IntervalStrategy | str
    eval_steps: float | None
    eval_delay: float
    per_device_eval_batch_size: int
    prediction_loss_only: bool
    eval_on_start: bool
    eval_do_concat_batches: bool
    eval_use_gather_object: bool
    eval_accumulation_steps: int | None
    include_for_metrics: list[str]
    batch_eval_metrics: bool
    save_only_model: bool
    save_strategy: SaveStrategy | str
    save_steps: float
    save_on_each_node: bool
    save_total_limit: int | None
    enable_jit_checkpoint: bool
    push_to_hub: bool
    hub_private_repo: bool | None
    hub_model_id: str | None
    hub_strategy: HubStrategy | str
    hub_always_push: bool
    hub_revision: str | None
    load_best_model_at_end: bool
    metric_for_best_model: str | None
    greater_is_better: bool | None
    ignore_data_skip: bool
    restore_callback_states_from_checkpoint: bool
    full_determinism: bool
    data_seed: int | None
    use_cpu: bool
    accelerator_config: dict | str | None
    parallelism_config: ParallelismConfig | None
    dataloader_drop_last: bool
    dataloader_num_workers: int
    dataloader_pin_memory: bool
    dataloader_persistent_workers: bool
    dataloader_prefetch_factor: int | None
    dataloader_multiprocessing_context: str | None
    dataloader_in_order: bool
    remove_unused_columns: bool
    label_names: list[str] | None
    train_sampling_strategy: str
    length_column_name: str
    ddp_find_unused_parameters: bool | None
    ddp_bucket_cap_mb: int | None
    ddp_broadcast_buffers: bool | None
    ddp_static_graph: bool | None
    ddp_backend: str | None
    ddp_timeout: int
    fsdp: str | None
    fsdp_config: dict[str, Any] | str | None
    deepspeed: dict | str | None
    debug: str | list[DebugOption]
    skip_memory_metrics: bool
    do_train: bool
    do_eval: bool
    do_predict: bool
    local_rank: int

class RunOptions(TrainerOverrides, total=False):
    max_steps: int | None
    epochs: float | None
    batch_size: int
    lr: float | None
    precision: str
    device: str
    eval_every: int | None
    save_every: int | None
    log_every: int | None
    run_dir: str | Path | None
    name: str | None
    max_length: int
    padding: str
    buckets: int
    packing: str
    seed: int
    compile: bool | None
    mode: str | None
    throughput_warmup_steps: int | None
    report_to: str | list | None
    sample_prompts: list | None
    sample_every: int | None
    sample_steps: int
    cache_latents: bool
