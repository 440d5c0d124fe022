"""Tiny generated data sets for the field test (run with the project's venv python).

Nothing here is downloaded: every file is made from a seeded generator, small enough
for a round of a few seconds to a minute on 2 CPU cores, in the format the project's
own loading code expects.

    python datagen.py corpus OUT [--chars N] [--format text|wiki40b]  English-like text
    python datagen.py lines-from SRC OUT [--skip K] [--lines N]  N lines of a file the project ships
    python datagen.py mnist-raw DIR                      MNIST idx files (torchvision's raw/ layout)
    python datagen.py imagefolder DIR                    train/ and validation/ class folders of PNGs
    python datagen.py tokenizer CORPUS DIR               a small BPE tokenizer (transformers format)
    python datagen.py evaluate-accuracy DIR              a local `accuracy` module for evaluate.load

Each command is idempotent: it rewrites its output from the same seed.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
from pathlib import Path


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


DET = words("the a one every some this that")
ADJ = words("old young quiet bright dark small great fair")
NOUN = words(
    "king queen knight lord lady man woman child friend stranger soldier servant "
    "city castle river forest field garden house road sea sky night morning"
)
VERB = words("sees loves takes gives finds keeps leaves calls follows hears answers brings")
CONJ = words("and but so then when while because if though")
PREP = words("with without under over near beyond across through into from of to")


def corpus_text(chars: int, seed: int = 1337) -> str:
    """Sentences from a small grammar: learnable structure, no outside text."""
    rng = random.Random(seed)
    det, adj, noun, verb, conj, prep = DET, ADJ, NOUN, VERB, CONJ, PREP
    lines: list[str] = []
    size = 0
    while size < chars:
        parts = [rng.choice(det), rng.choice(adj), rng.choice(noun), rng.choice(verb)]
        parts += [rng.choice(det), rng.choice(noun)]
        if rng.random() < 0.5:
            parts += [rng.choice(prep), rng.choice(det), rng.choice(noun)]
        if rng.random() < 0.3:
            parts += [rng.choice(conj), rng.choice(det), rng.choice(noun), rng.choice(verb)]
        line = " ".join(parts).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def cmd_corpus(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = corpus_text(args.chars, args.seed)
    if args.format == "wiki40b":
        # JSON lines of wiki40b's text field: articles of marked paragraphs
        lines = text.splitlines()
        records = []
        for i in range(0, len(lines), 8):
            paragraph = "_NEWLINE_".join(lines[i : i + 8])
            body = f"\n_START_ARTICLE_\nArticle {i // 8}\n_START_PARAGRAPH_\n{paragraph}\n"
            records.append(json.dumps({"text": body}))
        out.write_text("\n".join(records) + "\n")
    else:
        out.write_text(text)


def cmd_lines_from(args: argparse.Namespace) -> None:
    src = Path(args.src).read_text(errors="replace").splitlines(keepends=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(src[args.skip : args.skip + args.lines]))


def _digit_images(count: int, seed: int) -> tuple[bytes, bytes]:
    """28x28 uint8 images: a per-class template (strokes) plus noise and a small shift."""
    import numpy as np

    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 28, 28), dtype=np.float32)
    trng = np.random.default_rng(0)  # the same templates for every split
    for k in range(10):
        for _ in range(3):
            r0, c0, r1, c1 = trng.integers(4, 24, size=4)
            n = 40
            rows = np.linspace(r0, r1, n).round().astype(int)
            cols = np.linspace(c0, c1, n).round().astype(int)
            templates[k, rows, cols] = 1.0
            templates[k, np.clip(rows + 1, 0, 27), cols] = 1.0
    labels = rng.integers(0, 10, size=count).astype(np.uint8)
    images = templates[labels]
    shifts = rng.integers(-2, 3, size=(count, 2))
    for axis in (0, 1):
        for s in (-2, -1, 1, 2):
            sel = shifts[:, axis] == s
            images[sel] = np.roll(images[sel], s, axis=axis + 1)
    images = images * 200 + rng.normal(0, 30, size=images.shape)
    data = np.clip(images, 0, 255).astype(np.uint8)
    return data.tobytes(), labels.tobytes()


def cmd_mnist_raw(args: argparse.Namespace) -> None:
    raw = Path(args.dir) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, count, seed in (("train", 60000, 1), ("t10k", 10000, 2)):
        images, labels = _digit_images(count, seed)
        img = struct.pack(">IIII", 2051, count, 28, 28) + images
        lab = struct.pack(">II", 2049, count) + labels
        for name, blob in (
            (f"{prefix}-images-idx3-ubyte", img),
            (f"{prefix}-labels-idx1-ubyte", lab),
        ):
            (raw / name).write_bytes(blob)


def cmd_imagefolder(args: argparse.Namespace) -> None:
    import numpy as np
    from PIL import Image

    root = Path(args.dir)
    rng = np.random.default_rng(3)
    colors = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40)]
    for split, per_class in (
        ("train", args.per_class),
        ("validation", max(4, args.per_class // 4)),
    ):
        for k in range(args.classes):
            folder = root / split / f"class{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                base = np.array(colors[k % len(colors)], dtype=np.float32)
                img = base + rng.normal(0, 40, size=(args.size, args.size, 3))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i:03d}.png")


def cmd_tokenizer(args: argparse.Namespace) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=["<unk>", "<|endoftext|>"])
    tok.train([args.corpus], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
    )
    fast.save_pretrained(args.dir)


ACCURACY_MODULE = '''"""accuracy, written locally by the field test's data generator (evaluate.load
would fetch it from the hub otherwise)."""

import datasets
import evaluate


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="fraction of predictions equal to the references",
            citation="",
            inputs_description="predictions, references: lists of ints",
            features=datasets.Features(
                {"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}
            ),
        )

    def _compute(self, predictions, references):
        total = len(references)
        same = sum(int(p == r) for p, r in zip(predictions, references))
        return {"accuracy": same / total if total else 0.0}
'''


def cmd_evaluate_accuracy(args: argparse.Namespace) -> None:
    folder = Path(args.dir) / "accuracy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "accuracy.py").write_text(ACCURACY_MODULE)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("corpus")
    p.add_argument("out")
    p.add_argument("--chars", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--format", choices=("text", "wiki40b"), default="text")
    p.set_defaults(func=cmd_corpus)
    p = sub.add_parser("lines-from")
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--lines", type=int, default=2000)
    p.add_argument("--skip", type=int, default=0)
    p.set_defaults(func=cmd_lines_from)
    p = sub.add_parser("mnist-raw")
    p.add_argument("dir")
    p.set_defaults(func=cmd_mnist_raw)
    p = sub.add_parser("imagefolder")
    p.add_argument("dir")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--per-class", type=int, default=32)
    p.add_argument("--size", type=int, default=32)
    p.set_defaults(func=cmd_imagefolder)
    p = sub.add_parser("tokenizer")
    p.add_argument("corpus")
    p.add_argument("dir")
    p.add_argument("--vocab", type=int, default=400)
    p.set_defaults(func=cmd_tokenizer)
    p = sub.add_parser("evaluate-accuracy")
    p.add_argument("dir")
    p.set_defaults(func=cmd_evaluate_accuracy)
    args = parser.parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
