"""Code written for other libraries, run through the workbench (``compat.optimum_habana``)."""
