"""Scale-out: torchrun workers, DeepSpeed, and launch files for Slurm and Kubernetes."""
