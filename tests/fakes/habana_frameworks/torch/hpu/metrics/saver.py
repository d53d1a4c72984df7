"""TEST DOUBLE of habana_frameworks.torch.hpu.metrics.saver: the files ``metrics_dump`` writes.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/metrics/saver.py
@ 5a56187 (1.19.0); the file formats, the file naming and the enums' values are the same in
the newer copy ankurneog/gaudi-pytorch-bridge @ ea38cef. Rules:

- The name: with ``RANK`` (else ``OMPI_COMM_WORLD_RANK``) set, ``-rank<N>`` goes before the
  last extension (``m.json`` -> ``m-rank1.json``; ``_determine_file_name_for_multinode``).
- The folder: ``os.makedirs`` of the name's folder first, so a bare file name (no folder,
  ``dirname`` empty) fails with ``FileNotFoundError`` as it does on the bridge
  (``MetricWriter.__init__``); ``./m.json`` works.
- Never overwritten: the file is opened exclusively; if the name exists, ``.1``, ``.2``, ... is
  appended to the whole name (``_create_unique_file``).
- JSON (the default): one array, ``[`` then one object per metric, ``",\\n"`` between them,
  ``]\\n`` at the end; each object ``{"metric_name", "triggered_by", "generated_on"`` (ISO 8601
  time, taken per metric) ``, "statistics"`` (the metric's ``stats()`` as a dict)``}``
  (``MetricJsonWriter``).
- Text: per metric the lines ``Metric name: <name>``, ``Triggered by: <trigger>``,
  ``Generated on: <time>``, ``Statistics:``, a tab-indented ``<tag>: <value>`` line per stat,
  and an empty line (``MetricTextWriter``).
- An unknown format is a ``KeyError`` of the writer table (``FORMAT_TO_WRITER_MAP``), before any
  file is made.

Not emulated: the dumps the bridge makes by itself (``PT_HPU_METRICS_FILE`` with its triggers).
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from enum import Enum


# (str, Enum) as the bridge declares them, not StrEnum: f"{member}" (the text file's
# "Triggered by:" line) formats as the bridge's does on the same Python
class MetricDumpFormat(str, Enum):  # noqa: UP042
    json = "json"
    text = "text"


class MetricDumpTrigger(str, Enum):  # noqa: UP042
    # the two members both releases have (1.19 also has mark_step and metric_change)
    process_exit = "process_exit"
    user = "user"


def file_name_for_rank(name: str) -> str:
    stem, dot, ext = name.rpartition(".")
    if not dot:  # no "." at all: the whole name is the stem
        stem, ext = name, ""
    else:
        ext = "." + ext
    for var in ("RANK", "OMPI_COMM_WORLD_RANK"):
        if var in os.environ:
            return f"{stem}-rank{os.environ[var]}{ext}"
    return f"{stem}{ext}"


def _open_new(name: str):
    """Make the folder, then the first of name, name.1, name.2, ... that does not exist."""
    os.makedirs(os.path.dirname(name), exist_ok=True)
    candidate, n = name, 0
    while True:
        try:
            return open(candidate, "x")
        except FileExistsError:
            n += 1
            candidate = f"{name}.{n}"


def _json(metrics, trigger) -> str:
    objects = [json.dumps({"metric_name": m.name(), "triggered_by": trigger,
                           "generated_on": datetime.now().isoformat(),
                           "statistics": dict(m.stats())})
               for m in metrics]
    return "[" + ",\n".join(objects) + "]\n"


def _text(metrics, trigger) -> str:
    out = []
    for m in metrics:
        out += [f"Metric name: {m.name()}\n", f"Triggered by: {trigger}\n",
                f"Generated on: {datetime.now()}\n", "Statistics:\n"]
        out += [f"\t{tag}: {value}\n" for tag, value in m.stats()]
        out.append("\n")
    return "".join(out)


WRITERS = {MetricDumpFormat.json: _json, MetricDumpFormat.text: _text}


def dump(file_name: str, fmt, metrics, trigger=MetricDumpTrigger.user) -> str:
    """Write ``metrics`` (global metrics, in registration order) once; the path written."""
    write = WRITERS[fmt]  # KeyError for an unknown format, before the file is made
    with _open_new(file_name_for_rank(file_name)) as f:  # each metric timed as it is written
        f.write(write(metrics, trigger))
        return f.name
