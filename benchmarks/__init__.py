"""Benchmarks that measure ratios side by side in one process (``python -m benchmarks NAME``).

A developer's package of this repository, beside its data (``baselines/``, ``results/``):
not part of the ``gaudi-workbench`` wheel. One module per benchmark, each with a ``run``
function (``attachment``: a Trainer with and without ``wb.attach``; ``engine``,
``dashboard``, ``gaudicounts`` (``gaudi-counts`` on the command line: counts on the emulated
Gaudi, not times), ``scaling``, ``shapes``, ``mfu``, ``plan``, ``prompts``: a quality
figure, not a timing; ``sdcache``: text to image from the latent cache), the contenders they
share (``contenders``: the raw loop, the plain Trainer, wb.train, the interleaving) and the
command line (``cli``). This door imports nothing: ``from benchmarks import engine`` is the
module, ``engine.run(...)`` the benchmark.
"""
