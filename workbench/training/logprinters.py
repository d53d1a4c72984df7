"""transformers' log printers, printing only the logs a user's arguments ask for.

An attached run makes the Trainer log about 50 times a run for its dashboard; tqdm's bar
(``ProgressCallback``) or, with ``disable_tqdm``, ``PrinterCallback`` would print each as a
dict. ``quiet`` swaps them, on a Trainer the workbench holds, for ones that ask the
attachment (``added``) whether a log was its own.
"""

from __future__ import annotations

import weakref

from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback


class _UsersLogs(TrainerCallback):
    """The printer, skipping the logs ``attachment.added(state, logs)`` says it added."""

    def __init__(self, attachment, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._attachment = weakref.ref(attachment)

    def on_log(self, args, state, control, logs=None, **kwargs):
        attachment = self._attachment()
        if attachment is not None and attachment.added(state, logs):
            return None
        return super().on_log(args, state, control, logs=logs, **kwargs)


class _Bar(_UsersLogs, ProgressCallback):
    pass


class _Printer(_UsersLogs, PrinterCallback):
    pass


def quiet(trainer, attachment) -> None:
    """Swap ``trainer``'s log printer (``ProgressCallback``, or ``PrinterCallback`` with
    ``disable_tqdm``) for one that leaves out the logs ``attachment`` added: a held Trainer
    only (``wb.attach``, ``GaudiTrainer``). Through the Trainer's public ``remove_callback``
    and ``add_callback``; the bar's ``max_str_len`` kept."""
    for kind, ours in ((ProgressCallback, _Bar), (PrinterCallback, _Printer)):
        found = next((c for c in trainer.callback_handler.callbacks if type(c) is kind), None)
        if found is not None:
            trainer.remove_callback(found)
            extra = (
                {"max_str_len": found.max_str_len} if isinstance(found, ProgressCallback) else {}
            )
            trainer.add_callback(ours(attachment, **extra))
