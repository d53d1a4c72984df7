"""transformers' log printers, printing only the logs a user's arguments ask for (an attached
run logs about 50 times a run for its dashboard).
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
    """Swap a held ``trainer``'s log printer for one that leaves out the logs ``attachment``
    added (through ``remove_callback`` and ``add_callback``; the bar's ``max_str_len`` kept)."""
    for kind, ours in ((ProgressCallback, _Bar), (PrinterCallback, _Printer)):
        found = next((c for c in trainer.callback_handler.callbacks if type(c) is kind), None)
        if found is not None:
            trainer.remove_callback(found)
            extra = (
                {"max_str_len": found.max_str_len} if isinstance(found, ProgressCallback) else {}
            )
            trainer.add_callback(ours(attachment, **extra))
