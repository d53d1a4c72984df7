#!/usr/bin/env bash
# `make rehearse`: Intel's Gaudi container, rehearsed on a machine without one (issue 38, §3).
#
# 1. The image's Python: a copy of this machine's interpreter whose own site-packages (the
#    "system" ones a venv made with --system-site-packages sees) hold torch (the CPU build
#    constraints.txt pins, as Intel's image holds its own; ninja, which the double's device
#    extension is built with) and the test double of the bridge
#    and of habana-pyhlml, installed as distributions (tests/fakes copied into
#    site-packages with their .dist-info), not put on PYTHONPATH.
# 2. The README's setup on top, from a copy of this checkout's files: the Makefile's venv
#    target with PYTHON= that interpreter, which must take its Gaudi branch (it detects the
#    bridge), keep the image's torch and install no upstream DeepSpeed.
# 3. The HPU smoke in that venv (scripts/rehearse_smoke.py): torch unchanged, no DeepSpeed,
#    wb.train lazy, wb.doctor(device="hpu") (eager: its trainings, and its launch over hccl,
#    wb.launch(devices=2), checked rank by rank), notebooks 01, 12 and 13 under papermill in a
#    kernel of that venv.
#
# Run by `make rehearse` and, inside `make test`, by tests/test_rehearsal.py. Cached between
# runs on one machine outside the checkout (CI starts from a clean clone), under
# ${XDG_CACHE_HOME:-~/.cache}/gaudi-workbench/rehearse/<key> (REHEARSE_DIR= elsewhere), the key
# a hash of constraints.txt, pyproject.toml, scripts/gaudi_venv.py and the Python: the image's
# Python with its torch and the setup's venv (remade when the key changes, as `make` remakes
# .venv when those files change); the emulated device's build is the checkout's (below). One
# rehearsal at a time per cache (a lock).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
BASE=$("$PYTHON" -c 'import sys; print(sys.base_prefix)')
PYV=$("$PYTHON" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
KEY=$({ cat constraints.txt pyproject.toml scripts/gaudi_venv.py; echo "$BASE/bin/$PYV"; } | sha256sum | cut -c1-16)
R=${REHEARSE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gaudi-workbench/rehearse/$KEY}
SYS=$R/image
mkdir -p "$R"
start=$(date +%s)
say() { echo "rehearse [$(( $(date +%s) - start ))s]: $*"; }
# other keys' caches not used for two weeks go (an old constraints.txt's, another branch's)
[ -n "${REHEARSE_DIR:-}" ] || find "$(dirname "$R")" -mindepth 1 -maxdepth 1 -type d \
  ! -name "$KEY" -mtime +14 -exec rm -rf {} +
touch "$R"
exec 9>"$R/lock"
flock -n 9 || { say "waiting for another rehearsal using $R"; flock 9; }

# ---- 1. the image: its Python, its torch, its bridge
# (importing torch there loads the bridge, as in Intel's image: the checks read metadata only)
has_torch() { "$SYS/bin/python3" -c 'import importlib.metadata as m; print(m.version("torch"))'; }
if ! has_torch >/dev/null 2>&1; then
  say "making the image's Python under $SYS (torch from constraints.txt)"
  rm -rf "$SYS" && mkdir -p "$SYS/bin" "$SYS/lib/$PYV"
  cp "$BASE/bin/$PYV" "$SYS/bin/" && ln -s "$PYV" "$SYS/bin/python3"
  ln -s "$BASE/include" "$SYS/include"  # Python.h, for the double's C++ extension
  for entry in "$BASE/lib/$PYV"/*; do
    case "$(basename "$entry")" in site-packages|dist-packages) ;; *) ln -s "$entry" "$SYS/lib/$PYV/" ;; esac
  done
  # its own site-packages, where this interpreter's site module looks (Debian's: dist-packages)
  mkdir -p "$("$SYS/bin/python3" -c 'import site; print(site.getsitepackages()[0])')"
  "$SYS/bin/python3" -m ensurepip >/dev/null
  # a distribution's Python marked as managed by its package manager (PEP 668) refuses pip
  managed=$("$SYS/bin/python3" -c 'import sysconfig, os; print(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))')
  "$SYS/bin/python3" -m pip install -q --no-warn-script-location \
    $([ "$managed" = True ] && echo --break-system-packages) \
    $(grep -E '^(torch|numpy|ninja)==' constraints.txt) >"$R/image.log" 2>&1 \
    || { tail -20 "$R/image.log"; exit 1; }
fi
SITE=$("$SYS/bin/python3" -c 'import site; print(site.getsitepackages()[0])')
say "installing the bridge double and the HLML double as distributions"
rm -rf "$SITE"/habana_frameworks "$SITE"/habana_frameworks_double-*.dist-info "$SITE"/pyhlml \
  "$SITE"/pyhlml_double.py "$SITE"/habana_pyhlml-*.dist-info
(cd tests/fakes && tar --exclude=__pycache__ -cf - habana_frameworks pyhlml pyhlml_double.py \
  habana_frameworks_double-0.0.0.dist-info) | tar -xf - -C "$SITE"
HLML_VERSION=$(sed -n 's/^habana-pyhlml==//p' constraints.txt)
mkdir -p "$SITE/habana_pyhlml-$HLML_VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: habana-pyhlml\nVersion: %s\nSummary: TEST DOUBLE of habana-pyhlml (tests/fakes)\n' \
  "$HLML_VERSION" >"$SITE/habana_pyhlml-$HLML_VERSION.dist-info/METADATA"
for info in "$SITE"/habana_frameworks_double-*.dist-info "$SITE/habana_pyhlml-$HLML_VERSION.dist-info"; do
  echo pip >"$info/INSTALLER"
  (cd "$SITE" && find habana_frameworks pyhlml pyhlml_double.py "$(basename "$info")" -type f \
    | sed 's/$/,,/' >"$info/RECORD")
done
TORCH=$(has_torch)
# The double's emulated device is a C++ extension built with ninja (tests/fakes/README.md):
# ninja comes with the image here. One build serves the same sources, torch release and Python
# ABI (its folder's digest), so the image loads the checkout's and the suite loads the image's
export PATH="$SYS/bin:$PATH" FAKE_HPU_BUILD_DIR="${FAKE_HPU_BUILD_DIR:-$ROOT/.fake_hpu_build}"

# ---- 2. the README's setup, from this checkout's files (tracked and new, not ignored)
say "the README's setup (make's venv target, PYTHON=the image's Python) in $R/repo"
# The copy is refreshed over the last one, whose build outputs (the venv, the JavaScript the
# editable install built, node_modules) are kept; files gone from the checkout go from it too
mkdir -p "$R/repo"
git ls-files -co --exclude-standard | sort >"$R/files.new"
if [ -f "$R/files" ]; then
  comm -23 "$R/files" "$R/files.new" | (cd "$R/repo" && xargs -r -d '\n' rm -f --)
fi
mv "$R/files.new" "$R/files"
git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$R/repo"
say "copied this checkout's $(wc -l <"$R/files") files"
# A clean clone's files are newer than the venv's stamp, so make would remake a venv the same
# files made: the key says they are the same
if [ -f "$R/repo/.venv/.installed" ] && [ "$(cat "$R/repo/.venv/key" 2>/dev/null)" = "$KEY" ]; then
  say "the venv is the cached one (key $KEY)"
  # its pins first, then the stamp: make's Gaudi branch would otherwise remake both (the pins
  # depend on scripts/gaudi_venv.py, in the key) and run pip's install again (144 s)
  touch "$R/repo/.venv/torch-pin.txt" && touch "$R/repo/.venv/.installed"
  fresh=0
else  # from nothing
  rm -rf "$R/repo/.venv" "$R/repo/workbench/assets/build" "$R/repo/workbench/server/labextension"
  # The JavaScript is the checkout's, built from the same sources by `make` (`make test` builds
  # it before pytest): the editable install's build hook then skips it (skip-if-exists), as
  # it would in a checkout that ran `make js`. Built afresh below where the checkout has none.
  if [ -f workbench/assets/build/page.js ] && [ -f workbench/server/labextension/package.json ]; then
    cp -a workbench/assets/build "$R/repo/workbench/assets/"
    cp -a workbench/server/labextension "$R/repo/workbench/server/"
  fi
  fresh=1
fi
JSKEY=$(git ls-files -s -- js labextension package.json package-lock.json | sha256sum | cut -c1-16)
make -C "$R/repo" PYTHON="$SYS/bin/python3" .venv/.installed >"$R/setup.log" 2>&1 \
  || { tail -30 "$R/setup.log"; exit 1; }
[ "$fresh" = 0 ] || echo "$JSKEY" >"$R/js-key"  # the install just built it
echo "$KEY" >"$R/repo/.venv/key"
# The editable install built the JavaScript (pyproject's build hook); built again by make's
# `js` target when its sources changed since (their hash) or the build is missing
if [ "$(cat "$R/js-key" 2>/dev/null)" != "$JSKEY" ] || [ ! -f "$R/repo/workbench/assets/build/page.js" ]; then
  say "building the JavaScript (make js)"
  rm -rf "$R/repo/workbench/assets/build" "$R/repo/workbench/server/labextension"
  make -C "$R/repo" PYTHON="$SYS/bin/python3" js >"$R/js.log" 2>&1 || { tail -30 "$R/js.log"; exit 1; }
fi
echo "$JSKEY" >"$R/js-key"
grep -q -- '--system-site-packages' "$R/repo/.venv/pyvenv.cfg" 2>/dev/null \
  || grep -q 'include-system-site-packages = true' "$R/repo/.venv/pyvenv.cfg" \
  || { echo "rehearse: the setup did not take the Makefile's Gaudi branch"; exit 1; }

# ---- 3. the HPU smoke
say "the HPU smoke"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# what a Gaudi host's (or a test session's) environment may carry that the smoke sets itself
unset PYTHONPATH PT_HPU_LAZY_MODE PT_HPU_AUTOLOAD PT_HPU_RECIPE_CACHE_CONFIG HLS_MODULE_ID \
  HABANA_VISIBLE_MODULES ID RANK LOCAL_RANK WORLD_SIZE FAKE_HPU_DEVICE FAKE_HPU_COUNT \
  FAKE_HPU_RELEASE FAKE_HPU_LAYOUT FAKE_HPU_GENERATION FAKE_HPU_MEMORY WORKBENCH_DEVICE DS_ACCELERATOR ACCELERATE_TORCH_DEVICE JUPYTER_PATH
# the variables Intel's PyTorch image sets (Setup_and_Install dockerfiles/pytorch/Dockerfile.ubuntu
# @ b626de8): its PYTHONPATH (here empty folders), tcmalloc preloaded where this machine has it
mkdir -p "$tmp/root" "$tmp/usr/lib/habanalabs"
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4
(cd "$tmp" && env TMPDIR="$tmp" PYTHONPATH="$tmp/root:$tmp/usr/lib/habanalabs/" PIP_NO_CACHE_DIR=on \
  $([ -f "$tcmalloc" ] && echo "LD_PRELOAD=$tcmalloc") TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD=7516192768 \
  REHEARSE_SYSTEM_SITE="$SITE" REHEARSE_TORCH="$TORCH" FAKE_HPU_INTEL_TORCH=1 \
  FAKE_HPU_DEV_DIR="$tmp/accel" WORKBENCH_HPU_DEVICE_FILES="$tmp/accel/accel*" \
  WORKBENCH_RUNS="$tmp/runs" PATH="$R/repo/.venv/bin:$PATH" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$R/repo/.venv/bin/python" "$R/repo/scripts/rehearse_smoke.py")
say "done"
