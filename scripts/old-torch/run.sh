#!/usr/bin/env bash
# The emulated-HPU tests on an older torch (Intel's Gaudi 1.22 ships torch 2.7, 1.23 torch 2.9),
# outside CI: `scripts/old-torch/run.sh 2.7.1 [pytest files...]`. It makes a venv in
# /var/tmp/wb-torch-<version> with uv (PyPI's torch wheel, a CUDA build, and everything else at
# constraints.txt's versions), loads no_cuda_hooks.cpp before torch (see its comment), builds
# the double's device for that torch and runs the files one at a time. DEEPSPEED=0.14.4 (the
# base of Intel's fork) adds PyPI's DeepSpeed of that version, in a venv of its own. Needs g++
# and network access to PyPI. docs/install.md has what ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$1; shift
venv=/var/tmp/wb-torch-$version${DEEPSPEED:+-ds$DEEPSPEED}
uv=${UV:-.venv/bin/uv}
if [ ! -x "$venv/bin/python" ]; then
  grep -v -E '^(torch|torchvision|torchaudio|deepspeed)==' constraints.txt >"$venv.constraints"
  "$uv" venv -q -p "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" "$venv"
  "$uv" pip install -q --python "$venv/bin/python" -c "$venv.constraints" "torch==$version" \
    -e '.[devtools]'
  if [ -n "${DEEPSPEED:-}" ]; then
    DS_BUILD_OPS=0 "$uv" pip install -q --python "$venv/bin/python" --no-build-isolation \
      -c "$venv.constraints" setuptools "deepspeed==$DEEPSPEED"
    # the CUDA wheel brings triton, which finds no GPU driver and fails DeepSpeed's import of
    # it ("0 active drivers"); Intel's image has no triton
    "$uv" pip uninstall -q --python "$venv/bin/python" triton
  fi
fi
torch=$("$venv/bin/python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')
g++ -O1 -shared -fPIC -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -I"$torch/include" \
  -I"$torch/include/torch/csrc/api/include" scripts/old-torch/no_cuda_hooks.cpp -L"$torch/lib" \
  -lc10 -ltorch_cpu -Wl,-rpath,"$torch/lib" -o "$venv/no_cuda_hooks.so"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "import ctypes, sys; ctypes.CDLL(sys.prefix + '/no_cuda_hooks.so', mode=ctypes.RTLD_GLOBAL)" \
  >"$site/zz_no_cuda_hooks.pth"
export FAKE_HPU_BUILD_DIR=$venv.fake_hpu_build PYTHONPATH=$PWD
run() { "$venv/bin/python" -m pytest -n 0 -p no:cacheprovider -q --timeout=1800 "$@" 2>&1 | tail -30; }
if [ $# -gt 0 ]; then run "$@"; exit; fi  # pytest's own arguments: files, -k ...
for f in tests/test_hpu.py tests/test_emulated_*.py tests/test_counts.py tests/test_compat.py \
         tests/test_attach_ranks.py; do
  echo "=== $f $(date +%T)"
  run "$f"
done
echo "=== done $(date +%T)"
