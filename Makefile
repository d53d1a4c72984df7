# Two commands set up everything: `make lab` and `make test`. `make check` is the fast tier
# (every test not marked slow, under 3 minutes), `make lint` the static checks (seconds).
# Each (re)creates .venv when it is missing or older than pyproject.toml/constraints.txt.

PYTHON ?= python3
# transformers 5.24 requires Python 3.11 or newer: stop at once on an older one, before
# anything is created. Intel's Gaudi images: Ubuntu 24.04 (3.12), the Ubuntu 22.04 image built
# for Python 3.11, RHEL 9.4 (3.11, or 3.12) work; the plain Ubuntu 22.04 ones (3.10) do not.
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PY_OK := $(shell $(PYTHON) -c 'import sys; print(int(sys.version_info >= (3, 11)))' 2>/dev/null)
ifneq ($(PY_OK),1)
ifneq ($(MAKECMDGOALS),clean)
$(error $(PYTHON) is Python $(or $(PY_VERSION),(not found)); gaudi-workbench needs Python 3.11 or \
newer (transformers 5.24 does). On Gaudi use an Intel image on Ubuntu 24.04 (Python 3.12), its \
Ubuntu 22.04 image for Python 3.11 or RHEL 9.4 (1.22 has torch 2.7, 1.23 torch 2.9, 1.24 torch \
2.10), not a plain Ubuntu 22.04 one (Python 3.10); elsewhere pass PYTHON=python3.11 or newer)
endif
endif
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
STAMP  := $(VENV)/.installed
JS     := workbench/assets/build/dashboard.js
LABEXT := workbench/server/labextension/package.json
# Where JupyterLab looks for prebuilt extensions in this venv (a wheel installs it there)
LABDIR := $(VENV)/share/jupyter/labextensions/gaudi-workbench
JS_SOURCES := package.json package-lock.json js/package.json js/build.mjs $(wildcard js/src/*) \
              labextension/package.json labextension/tsconfig.json labextension/install.json \
              $(wildcard labextension/src/* labextension/style/*)
EXTRAS ?= dev
# Where the Python imports Intel's bridge (its container, or a host set up by Intel's
# installer), the venv sees that Python's torch and bridge and pins that torch, so pip can
# never replace it: scripts/gaudi_venv.py makes it (docs/gaudi.md, "Install shapes").
GAUDI  := $(shell $(PYTHON) -c "import habana_frameworks" >/dev/null 2>&1 && echo 1)
# The venv Intel's installer makes with --venv (HABANALABS_VIRTUAL_DIR moves it)
HABANA_VENV := $(or $(HABANALABS_VIRTUAL_DIR),$(HOME)/habanalabs-venv)
ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab test check venv lint constraints clean js python rehearse slurm-up slurm-down

venv: $(STAMP) $(JS) $(LABEXT)

# The JavaScript is built, never committed, and rebuilt whenever its sources or the lock
# file change (npm workspaces, package.json): js/ is the dashboard (uPlot, bundled by
# esbuild), labextension/ the JupyterLab extension (TypeScript, built by the venv's
# jupyter-builder). Needs Node.js 18+ and npm; a wheel user needs neither.
$(JS) $(LABEXT) &: $(JS_SOURCES) | $(STAMP)
	npm ci --no-audit --no-fund --loglevel=error
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npm run build --silent
	touch $(JS) $(LABEXT)

js: $(JS) $(LABEXT)

# The interpreter the venv is made from (the check above has passed when this runs)
python:
	@echo "$(PYTHON): Python $(PY_VERSION)"

$(STAMP): pyproject.toml constraints.txt $(if $(GAUDI),$(VENV)/torch-pin.txt)
ifeq ($(GAUDI),1)
	$(PY) -m pip install -e '.[$(if $(filter dev,$(EXTRAS)),devtools,$(EXTRAS))]' -c $(VENV)/torch-pin.txt
else
	@if [ -x $(HABANA_VENV)/bin/python ]; then echo "$(PYTHON) has no Habana bridge, but \
	$(HABANA_VENV) (Intel's installer, --venv) has: make $(MAKECMDGOALS) PYTHON=$(HABANA_VENV)/bin/python"; exit 1; fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, by pip, which reads this machine's pip configuration (where a CPU build
	# lies: find-links, a mirror): any later package asking for torch then finds it and pulls
	# no CUDA build. pip also brings uv, which installs the other ~200 packages in a fraction
	# of pip's time (docs/tests.md has both timings). uv keeps an installed torch that meets the
	# constraint; it reads no pip configuration: a mirror is UV_DEFAULT_INDEX (docs/install.md).
	$(PY) -m pip install -c constraints.txt torch==2.13.0 uv
	# DeepSpeed ships only as source and its build imports torch: build it against the torch
	# just installed (an isolated build would fetch a CUDA torch), with its ops JIT-compiled.
	# --compile-bytecode: uv compiles nothing by default, pip does; without bytecode, and where
	# PYTHONDONTWRITEBYTECODE is set, every process compiled transformers, peft and datasets
	# again (6.5 CPU s more each; docs/course.md)
	DS_BUILD_OPS=0 $(UV) pip install --python $(PY) --no-build-isolation --compile-bytecode -c constraints.txt setuptools deepspeed==0.19.8
	$(UV) pip install --python $(PY) --compile-bytecode -c constraints.txt -e '.[$(EXTRAS)]'
endif
	# The editable install enabled the server extension (etc/jupyter/jupyter_server_config.d)
	# and copied the built JupyterLab extension into the venv: link it instead, so a rebuild
	# (make js) shows at the next page load, as `jupyter labextension develop` does.
	rm -rf $(LABDIR) && mkdir -p $(dir $(LABDIR)) && ln -s $(CURDIR)/workbench/server/labextension $(LABDIR)
	touch $(STAMP)

# Gaudi: the venv (scripts/gaudi_venv.py) and the pins. DeepSpeed on Gaudi is Intel's fork
# (HabanaAI/DeepSpeed at the release's tag; Intel: "installing public DeepSpeed packages is not
# supported"): a fork the Python has is pinned as it is, and upstream's is never installed (the
# dev extra is devtools + deepspeed: devtools here)
$(VENV)/torch-pin.txt: pyproject.toml constraints.txt scripts/gaudi_venv.py
	$(PYTHON) scripts/gaudi_venv.py $(VENV)
	$(PY) -c "import torch; print('torch==' + torch.__version__)" > $@
	$(PY) -c "import importlib.metadata as m; print('deepspeed==' + m.version('deepspeed'))" \
	  >> $@ 2>/dev/null || echo "no DeepSpeed: for ZeRO on Gaudi install Intel's fork (docs/gaudi.md)"
	grep -v -e '^torch==' -e '^deepspeed==' constraints.txt >> $@

lab: $(STAMP) $(JS) $(LABEXT)
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks $(ROOT_FLAG)

# Two pytest workers (pytest-xdist): each test runs torch on one thread (tests/conftest.py),
# so the CI machine's two cores each take a test. JOBS=0 runs everything in this process.
JOBS ?= 2
test: $(STAMP) $(JS) $(LABEXT)
	$(PY) -m pytest -n $(JOBS) --dist worksteal $(PYTEST_ARGS)

# The fast tier: every test but the end-to-end ones (marked `slow`: notebooks, browsers,
# launches, benchmarks, runs in a subprocess, trainings of more than a few seconds), each
# with the fast tier's timeout (pyproject.toml). docs/tests.md has its time.
check: $(STAMP) $(JS) $(LABEXT)
	$(PY) -m pytest -n $(JOBS) --dist worksteal -m "not slow" $(PYTEST_ARGS)

# Static checks: ruff (lint, and the package as `ruff format` writes it), the layers
# (`lint-imports`: import-linter's contracts in pyproject.toml), the types (pyright, npm's,
# basic mode over workbench/: pyproject.toml's [tool.pyright]), then the policy tests
# (marked `policy`: they read the source and the docs only: README shape, docs tables,
# what the contracts cannot say, the environment variables, writes into library objects).
lint: $(STAMP) $(JS)
	$(VENV)/bin/ruff check workbench benchmarks tests scripts
	$(VENV)/bin/ruff format --check workbench benchmarks
	$(VENV)/bin/lint-imports
	node_modules/.bin/pyright
	$(PY) -m pytest -n 0 -q -m policy -p no:cacheprovider

# Intel's Gaudi container, rehearsed (scripts/rehearse.sh): an image-like Python holding torch
# and the bridge's test double as distributions, this README's setup on top of it (the Gaudi
# branch above), then an HPU smoke (torch kept, no upstream DeepSpeed, wb.train eager and lazy,
# wb.launch over two cards, the doctor, notebooks 01, 12 and 13). `make test` runs it too
# (tests/test_rehearsal.py); this target runs it alone. Cached outside the checkout, under
# ~/.cache/gaudi-workbench/rehearse/; docs/tests.md has its time.
rehearse:
	PYTHON=$(PYTHON) scripts/rehearse.sh

# A real two-node Slurm cluster on this machine (root; Debian's slurmctld, slurmd, munge, and
# sshd + pdsh on the nodes for DeepSpeed's launcher where installed:
# scripts/slurm-cluster.sh says what is missing), the one tests/test_slurm.py starts for
# itself. Submit from its login node: `scripts/slurm-cluster.sh exec $(SLURM_DIR) sbatch
# job.sbatch` (squeue, scancel, a notebook's python likewise); docs/multi-node.md.
SLURM_DIR ?= .slurm
slurm-up:
	scripts/slurm-cluster.sh up $(SLURM_DIR)
	@echo "up: scripts/slurm-cluster.sh exec $(SLURM_DIR) sinfo; make slurm-down stops it"

slurm-down:
	scripts/slurm-cluster.sh down $(SLURM_DIR)

constraints: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v '^gaudi-workbench' \
	  | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/' > constraints.new
	@echo "review constraints.new, keep the header of constraints.txt, then move it over"

clean:
	rm -rf $(VENV) .pytest_cache node_modules js/node_modules workbench/assets/build workbench/server/labextension labextension/lib
