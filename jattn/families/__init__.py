"""Model families: one folder per family, each a ``FamilySpec`` (data) registered under its
Hugging Face ``model_type``. This package is the only place that names a family.

Adding a family: a folder ``families/<name>/`` with ``spec.py`` (and ``convert.py`` for its key
table), and its name in ``FOLDERS`` below. A family imports no other family: rows several families
share are a table of ``layouts/``, named by layout.
"""

import importlib

from jattn.families.spec import FamilySpec as FamilySpec, get, names as names

FOLDERS = (
    "bert",
    "roberta",
    "electra",
    "mpnet",
    "marian",
    "fsmt",
    "bart",
    "roberta_prelayernorm",
    "mbart",
    "m2m_100",
    "t5",
    "deberta_v2",
    "xlm_roberta",
    "distilbert",
    "albert",
    "modernbert",
    "gpt2",
    "llama",
    "qwen2",
    "gemma2",
)
for _folder in FOLDERS:
    importlib.import_module(f"jattn.families.{_folder}.spec")

__all__ = ["get"]
