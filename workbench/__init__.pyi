"""What ``import workbench as wb`` serves: the one list of the public names.

Type checkers and editors read this stub; at run time ``workbench/__init__.py`` hands it to
``lazy_loader.attach_stub``, which serves each name below from its module on first use, so
``import workbench`` imports no torch, transformers or Habana bridge. Only relative imports
(``from .module import name as name``) go here: lazy_loader reads nothing else.
"""

from .backends.registry import DeviceInfo as DeviceInfo
from .backends.registry import device as device
from .backends.registry import devices as devices
from .catalog.modelspec import ModelSpec as ModelSpec
from .catalog.modelspec import model as model
from .catalog.modelspec import models as models
from .checks.checkup import doctor as doctor
from .data.dataset import DataSpec as DataSpec
from .data.dataset import dataset as dataset
from .data.dataset import datasets as datasets
from .forms.form import train_form as train_form
from .forms.pickers import pick_dataset as pick_dataset
from .forms.pickers import pick_model as pick_model
from .nbrecord import record as record
from .nbrecord import records as records
from .planning.accuracy import plan_accuracy as plan_accuracy
from .planning.memory import MemoryPlan as MemoryPlan
from .planning.memory import plan_memory as plan_memory
from .planning.planner import plan as plan
from .planning.trainingplan import TrainingPlan as TrainingPlan
from .rundir.run import compare as compare
from .rundir.run import runs as runs
from .scaleout.launcher import launch as launch
from .scaleout.launcher import launch_command as launch_command
from .training.attachment import attach as attach
from .training.attachment import callback as callback
from .training.defaults import bucket_collator as bucket_collator
from .training.defaults import training_args as training_args
from .training.engine import Run as Run
from .training.engine import train as train
from .training.profiler import profile as profile
from .version import __version__ as __version__

__all__: list[str]

def load_ipython_extension(ipython: object) -> None: ...
