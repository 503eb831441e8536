"""The papers' models, built from their configs composed through Hydra: exact parameter counts
(the released scripts' numbers where they state one), and output shapes on tiny inputs."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from experiments.engine.rank.build import build_model_for
from experiments.engine.launcher.compose import compose_job

CIFAR10 = {"input_shape": (3, 32, 32), "num_classes": 10}
CIFAR100 = {"input_shape": (3, 32, 32), "num_classes": 100}
FASHION_MNIST = {"input_shape": (1, 28, 28), "num_classes": 10}
MOVIELENS_20M = {"num_users": 138_493, "num_items": 26_744}
WIKITEXT2_RELEASED_VOCAB = 28_869
REPO = Path(__file__).resolve().parents[1]


def build(option: str, inputs: dict[str, Any], *overrides: str) -> torch.nn.Module:
    cfg = compose_job([f"model={option}", *(f"model.{o}" for o in overrides)])
    return build_model_for(cfg, inputs)


def parameter_count(model: torch.nn.Module) -> int:
    # parameters() yields a shared (tied) tensor once, as a gradient exchange sees it.
    return sum(p.numel() for p in model.parameters())


COUNTS = [
    ("resnet18", CIFAR10, (), 11_173_962),
    ("resnet18", CIFAR100, (), 11_220_132),
    ("resnet18", FASHION_MNIST, (), 11_172_810),  # one-channel stem: 1,152 fewer (the endtoend and selection studies)
    ("resnet152", CIFAR10, (), 58_156_618),
    ("resnet152", CIFAR100, (), 58_341_028),
    ("resnet110", CIFAR10, (), 1_727_962),  # option A: parameter-free shortcuts (paper, DGC)
    ("resnet110", CIFAR10, ("shortcut=B",), 1_730_714),  # the commonly quoted count: 1x1 conv + BN shortcuts
    ("googlenet", CIFAR10, (), 6_166_250),
    ("googlenet", CIFAR100, (), 6_258_500),
    ("senet18", CIFAR10, (), 11_260_354),
    ("senet18", CIFAR100, ("variant=pytorch_cifar100",), 11_436_256),
    ("vgg19", CIFAR10, (), 20_565_834),
    ("vgg19", CIFAR100, (), 20_612_004),
    ("vgg19", CIFAR10, ("head=linear",), 20_040_522),
    ("vgg19", CIFAR10, ("head=mlp4096",), 38_958_922),
    # ExDyna's released CIFAR-100 VGG-19 (workload=vgg19_cifar100): 20,035,392 features
    # + 512*4096+4096 + 4096*4096+4096 + 4096*100+100 = 20,035,392 + 19,292,260.
    ("vgg19", CIFAR100, ("head=released_cifar100",), 39_327_652),
    ("inception_v4", CIFAR100, (), 41_296_516),
    ("lstm", {"vocab_size": WIKITEXT2_RELEASED_VOCAB}, (), 28_949_319),
    ("ncf", MOVIELENS_20M, (), 31_832_577),
    ("mlp", FASHION_MNIST, (), 269_322),  # the laptop workload: 784*256+256 + 256*256+256 + 256*10+10
]


@pytest.mark.parametrize(
    "option,inputs,overrides,expected", COUNTS, ids=[f"{o}-{'-'.join(v) or 'default'}-{e}" for o, _, v, e in COUNTS]
)
def test_parameter_count_is_the_released_one(option, inputs, overrides, expected):
    assert parameter_count(build(option, inputs, *overrides)) == expected


@pytest.mark.parametrize("vocab_size", [2, 100, 10_000, 33_278])
def test_lstm_count_follows_651_per_token_plus_the_lstm(vocab_size):
    assert parameter_count(build("lstm", {"vocab_size": vocab_size})) == 651 * vocab_size + 10_155_600


def test_lstm_untied_has_a_decoder_matrix_of_its_own():
    vocab_size = 100
    model = build("lstm", {"vocab_size": vocab_size}, "tie_weights=false")
    assert model.decoder.weight is not model.embedding.weight
    assert parameter_count(model) == 651 * vocab_size + 10_155_600 + 650 * vocab_size


# ResNet-152 and Inception-v4 included: a batch of two takes about a second each on one thread.
IMAGE_MODELS = [
    ("resnet18", CIFAR10, ()),
    ("resnet152", CIFAR100, ()),
    ("resnet110", CIFAR10, ()),
    ("resnet110", CIFAR10, ("shortcut=B",)),
    ("googlenet", CIFAR100, ()),
    ("senet18", CIFAR10, ()),
    ("senet18", CIFAR100, ("variant=pytorch_cifar100",)),
    ("vgg19", CIFAR10, ()),
    ("vgg19", CIFAR100, ("head=linear",)),
    ("vgg19", CIFAR10, ("head=mlp4096",)),
    ("vgg19", CIFAR100, ("head=released_cifar100",)),
    ("inception_v4", CIFAR100, ()),
]


@pytest.mark.parametrize(
    "option,inputs,overrides", IMAGE_MODELS, ids=[f"{o}-{i['num_classes']}-{'-'.join(v) or 'default'}" for o, i, v in IMAGE_MODELS]
)
def test_image_model_maps_a_cifar_batch_to_class_scores(option, inputs, overrides):
    torch.manual_seed(0)
    model = build(option, inputs, *overrides)
    with torch.no_grad():
        scores = model(torch.randn(2, *inputs["input_shape"]))
    assert scores.shape == (2, inputs["num_classes"]) and torch.isfinite(scores).all()


def test_lstm_maps_tokens_to_logits_and_carries_its_state():
    vocab_size, seq_len, batch = 50, 7, 3
    model = build("lstm", {"vocab_size": vocab_size})
    assert model.decoder.weight is model.embedding.weight
    tokens = torch.randint(vocab_size, (seq_len, batch))
    logits, (h, c) = model(tokens)
    assert logits.shape == (seq_len, batch, vocab_size)
    assert h.shape == c.shape == (3, batch, 650)
    zeros = model.init_hidden(batch, torch.device("cpu"))
    assert all(part.shape == (3, batch, 650) and not part.any() for part in zeros)
    model.eval()  # no dropout: a zero state passed explicitly is the same as none
    with torch.no_grad():
        assert torch.equal(model(tokens)[0], model(tokens, zeros)[0])
        assert not torch.equal(model(tokens)[0], model(tokens, model(tokens)[1])[0])


def test_ncf_maps_user_item_pairs_to_one_logit_each():
    model = build("ncf", {"num_users": 20, "num_items": 30})
    users, items = torch.randint(20, (16,)), torch.randint(30, (16,))
    logits = model(users, items)
    assert logits.shape == (16,) and logits.dtype == torch.float32


def _layer_types(module: torch.nn.Module) -> list[str]:
    return [type(layer).__name__ for layer in module]


def test_vgg19_features_are_configuration_e_with_batchnorm():
    convs = [layer for layer in build("vgg19", CIFAR100).features if isinstance(layer, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (i, o, (3, 3), (1, 1)) for i, o in zip((3, 64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512),
                                              (64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512, 512))]
    stack = ["Conv2d", "BatchNorm2d", "ReLU"]
    pool = ["MaxPool2d"]
    assert _layer_types(build("vgg19", CIFAR100).features) == (
        stack * 2 + pool + stack * 2 + pool + stack * 4 + pool + stack * 4 + pool + stack * 4 + pool)


@pytest.mark.parametrize(
    "head,layers",
    [
        # ExDyna's released CIFAR-100 head: a dropout before each Linear, the first on the features.
        ("released_cifar100", [("Dropout", None), ("Linear", (512, 4096)), ("ReLU", None),
                               ("Dropout", None), ("Linear", (4096, 4096)), ("ReLU", None),
                               ("Dropout", None), ("Linear", (4096, 100))]),
        ("mlp4096", [("Linear", (512, 4096)), ("ReLU", None), ("Dropout", None),
                     ("Linear", (4096, 4096)), ("ReLU", None), ("Dropout", None), ("Linear", (4096, 100))]),
        ("mlp512", [("Dropout", None), ("Linear", (512, 512)), ("ReLU", None),
                    ("Dropout", None), ("Linear", (512, 512)), ("ReLU", None), ("Linear", (512, 100))]),
        ("linear", [("Linear", (512, 100))]),
    ],
)
def test_vgg19_head_layers_in_order(head, layers):
    classifier = build("vgg19", CIFAR100, f"head={head}").classifier
    found = [(type(layer).__name__, (layer.in_features, layer.out_features) if isinstance(layer, torch.nn.Linear) else None)
             for layer in classifier]
    assert found == layers
    assert all(layer.p == 0.5 for layer in classifier if isinstance(layer, torch.nn.Dropout))


def test_vgg19_cifar100_workload_builds_the_released_head():
    cfg = compose_job(["workload=vgg19_cifar100"])
    assert cfg.model.head == "released_cifar100"
    model = build_model_for(cfg, CIFAR100)
    assert _layer_types(model.classifier) == ["Dropout", "Linear", "ReLU", "Dropout", "Linear", "ReLU", "Dropout", "Linear"]
    assert parameter_count(model) == 39_327_652


@pytest.mark.parametrize(
    "option,inputs,override,message",
    [
        ("senet18", CIFAR100, "variant=cifar100", "variant must be one of pytorch_cifar, pytorch_cifar100"),
        ("vgg19", CIFAR10, "head=big", "head must be one of mlp512, linear, mlp4096, released_cifar100"),
        ("resnet110", CIFAR10, "shortcut=C", "shortcut must be one of A, B"),
        ("ncf", MOVIELENS_20M, "mlp_layers=[255,64]", "mlp_layers must start with an even width"),
    ],
)
def test_bad_knob_value_names_the_knob_and_the_choices(option, inputs, override, message):
    with pytest.raises(ValueError, match=message):
        build(option, inputs, override)


# The inputs each dataset gives a model at paper scale (the releases' data, not the stand-ins).
PAPER_INPUTS = {"fashion_mnist": FASHION_MNIST, "cifar10": CIFAR10, "cifar100": CIFAR100, "movielens": MOVIELENS_20M,
                "wikitext2": {"vocab_size": WIKITEXT2_RELEASED_VOCAB}}
STATED_COUNT = re.compile(r"\((\d{1,3}(?:,\d{3})+) parameters")


def _header(path: Path) -> str:
    """The comment block that opens a config file (what --help and a reader see first)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def _model_overrides(cfg) -> tuple[str, ...]:
    """The workload's model knobs that differ from the model option's own defaults."""
    default = compose_job([f"model={cfg.model.name}"]).model
    return tuple(f"{key}={value}" for key, value in cfg.model.items() if default.get(key) != value)


WORKLOADS = sorted(path.stem for path in (REPO / "conf" / "workload").glob("*.yaml"))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_workloads_stated_parameter_count_is_its_models(workload):
    """A description's "(N parameters" is the count of the model the workload builds, at the
    paper's data, as COUNTS verifies by building it: ResNet-110's once said option B's count
    while the workload builds option A. A count COUNTS lacks must be added there first."""
    cfg = compose_job([f"workload={workload}"])
    stated = [int(count.replace(",", "")) for count in STATED_COUNT.findall(_header(REPO / "conf" / "workload" / f"{workload}.yaml"))]
    if not stated:
        return
    key = (cfg.model.name, PAPER_INPUTS[cfg.dataset.name], _model_overrides(cfg))
    verified = {(option, inputs_key(inputs), overrides): count for option, inputs, overrides, count in COUNTS}
    assert (key[0], inputs_key(key[1]), key[2]) in verified, f"add {key} to COUNTS (built and counted there)"
    assert stated[0] == verified[(key[0], inputs_key(key[1]), key[2])], workload


def inputs_key(inputs: dict[str, Any]) -> tuple:
    return tuple(sorted(inputs.items()))


def test_every_parameter_count_the_docs_state_is_a_verified_one():
    """Every "N parameters" in the model and workload descriptions, the README and docs/ is a
    count COUNTS builds and checks (or the LSTM's vocabulary-free part), so none can drift."""
    verified = {count for *_, count in COUNTS} | {10_155_600}
    places = [*(REPO / "conf").glob("*/*.yaml"), REPO / "README.md", *(REPO / "docs").glob("*.md")]
    stated = re.compile(r"(\d{1,3}(?:,\d{3}){2,})(?= parameters| \(option|\)? *\| *(?:CIFAR|MovieLens|WikiText))")
    for path in places:
        for count in stated.findall(path.read_text()):
            assert int(count.replace(",", "")) in verified, f"{path.relative_to(REPO)} states {count}"
