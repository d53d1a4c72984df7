from .activity_profiler import *  # noqa: F403 (as the bridge's activity_profiler/__init__.py)
