"""Benchmarks that measure ratios side by side in one process (``python -m workbench.bench``).

One module per benchmark (``attachment``: a Trainer with and without ``wb.attach``;
``engine``, ``dashboard``, ``gaudicounts`` (``gaudi-counts`` on the command line: counts on
the emulated Gaudi, not times), ``scaling``, ``shapes``, ``mfu``, ``plan``,
``prompts``: a quality figure, not a timing; ``sdcache``: text to image from the latent cache), the
contenders they share (``contenders``: the raw loop, the plain Trainer, wb.train, the
interleaving) and the command line (``cli``). Each benchmark's function is exported here
under its module's name, so ``workbench.bench.engine`` is the function; import a module's
other names with ``from workbench.bench.engine import ...``.
"""

from .attachment import attachment
from .cli import BASELINES, BENCHES, main, parser, save_baseline
from .contenders import SHAPES, engine_setup
from .dashboard import dashboard
from .engine import engine
from .gaudicounts import gaudicounts
from .mfu import mfu
from .plan import plan
from .prompts import prompts
from .scaling import scaling
from .sdcache import sdcache
from .shapes import shapes

__all__ = [
    "BASELINES",
    "BENCHES",
    "SHAPES",
    "attachment",
    "dashboard",
    "engine",
    "gaudicounts",
    "engine_setup",
    "main",
    "mfu",
    "parser",
    "plan",
    "prompts",
    "save_baseline",
    "scaling",
    "sdcache",
    "shapes",
]
