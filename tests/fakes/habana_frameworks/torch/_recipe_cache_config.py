"""TEST DOUBLE of the bridge's recipe cache configuration (C++ in the real bridge): what
``PT_HPU_RECIPE_CACHE_CONFIG`` held when the bridge loaded, so tests can see whether the
disk cache of compiled graphs was on.

Source: gaudi-pytorch-bridge @ 5a56187,
pytorch_helpers/habana_helpers/habana_serialization/recipe_cache_config.cpp
(``RecipeCacheConfig::reload``): the variable is a comma-separated list of 1 to 3 fields,
path, delete-on-start, size limit in MB (``HABANA_ASSERT`` on any other count); an empty
path means no disk cache. The bridge reads its flags through a cache
(backend/synapse_helpers/env_flags_impl.h, ``GET_ENV_FLAG_NEW_READ_CACHE``); the double reads
the variable once, when ``habana_frameworks.torch`` is imported, which is when the workbench
must have set it.
"""

import os

from habana_frameworks import _release

# 1.19 accepts 1 to 3 fields. Current bridges add a fourth, <RECIPE_CACHE_ON_NFS> (default
# ",false,1024,false"): from Intel's latest Runtime Flags page as read on 2026-12-04
# (shared/HPU_FACTS.md). Unverified here: the stored copies of that page and the newer
# bridge copy's recipe_cache_config.cpp (@ ea38cef) still show three fields.
MAX_FIELDS = 4 if _release.current() else 3
CONFIG = os.environ.get("PT_HPU_RECIPE_CACHE_CONFIG")  # as the bridge saw it when it loaded
FIELDS = CONFIG.split(",") if CONFIG else []
if CONFIG is not None and not 1 <= len(FIELDS) <= MAX_FIELDS:
    raise RuntimeError("Expected number of parameters extracted from PT_HPU_RECIPE_CACHE_CONFIG "
                       f"should be from range <1:{MAX_FIELDS}>.")
PATH = FIELDS[0] if FIELDS and FIELDS[0] else None  # None: the disk cache is off
ON_NFS = len(FIELDS) == 4 and FIELDS[3].lower() == "true"
