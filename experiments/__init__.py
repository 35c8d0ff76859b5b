"""The five studies and what they build on, as experiment scripts on jattn's public API.

Each folder is one study: ``study.py`` holds its ``stages(profile)``, registers them with
``jattn.reproduce.studies.register`` and states in its docstring the paper, its protocol, where
jattn's protocol differs and the command that runs it; the other files of the folder are its
parts, ``verdicts.py`` its decision rules (registered after every study). A study imports no
other study: what several read (the fine-tuned classifiers, the translation model, GAP's pages)
is ``experiments/common.py``, the papers' numbers ``experiments/papers.py``. ``jattn reproduce``
imports this package; the imports below are the run order (a study's stages may read an earlier
one's results: the classifiers of ``finetune`` are read by Kovaleva's and Michel's).
"""

from experiments.finetune import study as _finetune  # noqa: F401
from experiments.clark2019 import study as _clark  # noqa: F401
from experiments.kobayashi2020 import study as _kobayashi  # noqa: F401
from experiments.kovaleva2019 import study as _kovaleva  # noqa: F401
from experiments.michel2019 import study as _michel  # noqa: F401
from experiments.voita2019 import study as _voita  # noqa: F401
from experiments.patching import study as _patching  # noqa: F401
from experiments.olsson2022 import study as _induction  # noqa: F401
from experiments.olsson2022 import natural as _induction_natural  # noqa: F401

from experiments.finetune import verdicts as _finetune_rules  # noqa: F401
from experiments.clark2019 import verdicts as _clark_rules  # noqa: F401
from experiments.kobayashi2020 import verdicts as _kobayashi_rules  # noqa: F401
from experiments.kovaleva2019 import verdicts as _kovaleva_rules  # noqa: F401
from experiments.michel2019 import verdicts as _michel_rules  # noqa: F401
from experiments.voita2019 import verdicts as _voita_rules  # noqa: F401
from experiments.patching import verdicts as _patching_rules  # noqa: F401
from experiments.olsson2022 import verdicts as _induction_rules  # noqa: F401
from experiments.olsson2022 import natural_verdicts as _induction_natural_rules  # noqa: F401
