"""A researcher's own DDP training script, with a sparsebench sparsifier added in a few lines.

    torchrun --nproc-per-node=2 examples/ddp_train.py --sparsifier deft --density 0.01 --out runs/a
    torchrun --nproc-per-node=2 examples/ddp_train.py --out runs/a --steps 200 --resume

Everything but the lines marked `# sparsebench:` is plain PyTorch: a torchvision model (no
pretrained weights, so no download), your own images (`--data-dir`, an ImageFolder) or
torchvision's FakeData, DistributedSampler, SGD. The hook replaces DDP's gradient all-reduce by
the sparsifier's exchange (docs/ddp_hook.md, "Use a sparsifier in your own DDP script"). Rank 0 writes one
line per step to OUT/stats.jsonl (the loss and the hook's statistics); every rank saves
OUT/checkpoint.rank<r>.pt at the end (model, optimizer, hook state, step), which `--resume`
continues from, exactly. `--steps` counts all steps, the resumed ones included.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torchvision
import yaml
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from experiments.engine.ddp import applies_momentum, register_sparsifier, sparsifier_node  # sparsebench: the public API
from experiments.runformat.errors import ConfigError


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", help="any torchvision classification model")
    parser.add_argument("--sparsifier", default="deft", help="a conf/sparsifier/ name: deft, micro, exdyna, topk, dgc, ...")
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE",
                        help="another knob of the sparsifier, repeatable (e.g. --knob exchange=sparse_allgather)")
    parser.add_argument("--steps", type=int, default=100, help="total steps, the resumed ones included")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9, help="0 for dgc (it applies momentum itself)")
    parser.add_argument("--data-dir", type=Path, help="an ImageFolder (one folder per class); else FakeData")
    parser.add_argument("--fake-images", type=int, default=1024, help="FakeData's size without --data-dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("outputs/ddp_example"))
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out")
    parser.add_argument("--wandb", choices=("off", "offline", "online"), default="off")
    parser.add_argument("--check", action="store_true",
                        help="check the arguments and exit (make example does, in one process, before torchrun)")
    args = parser.parse_args()
    # Bad input fails here, on every rank, before any process group or collective exists.
    if args.model not in torchvision.models.list_models(module=torchvision.models):
        fail(f"--model {args.model} is not a torchvision classification model: try resnet18, mobilenet_v3_small")
    if args.data_dir is not None and not args.data_dir.is_dir():
        fail(f"--data-dir {args.data_dir} is not a directory: give an ImageFolder, or leave it out for FakeData")
    checkpoint = args.out / f"checkpoint.rank{os.environ.get('RANK', '0')}.pt"
    if args.resume and not checkpoint.is_file():
        fail(f"--resume: no {checkpoint}: run once without --resume, with the same --out")
    try:
        args.knobs = {"density": args.density, **dict(parse_knob(text) for text in args.knob)}
        node = sparsifier_node(args.sparsifier, args.knobs)  # sparsebench: checks the method and its knobs now
    except ConfigError as error:
        fail(str(error))
    if applies_momentum(node) and args.momentum != 0:  # sparsebench: DGC applies momentum itself
        fail(f"--sparsifier {args.sparsifier} applies momentum itself: pass --momentum 0")
    return args


def fail(message: str) -> NoReturn:
    """Bad input: one line naming the option and the fix, exit status 2, no traceback."""
    print(f"ddp_train.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_knob(text: str) -> tuple[str, Any]:
    """`blocks=32` -> ("blocks", 32): values are read as YAML literals, like a Hydra override."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise ConfigError(f"--knob {text}: write KEY=VALUE, e.g. --knob exchange=sparse_allgather")
    parsed = yaml.safe_load(value)
    try:  # YAML 1.1 reads 1e-3 as a string; Hydra (and the user) mean a number
        return key, float(parsed) if isinstance(parsed, str) else parsed
    except ValueError:
        return key, parsed


def dataset(args: argparse.Namespace) -> tuple[torch.utils.data.Dataset, int]:
    """The training images and their class count."""
    T = torchvision.transforms
    if args.data_dir is None:  # FakeData draws image i from seed i: the same images every run
        return torchvision.datasets.FakeData(args.fake_images, (3, args.image_size, args.image_size), 10,
                                             transform=T.ToTensor()), 10
    transform = T.Compose([T.Resize(args.image_size), T.CenterCrop(args.image_size), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    images = torchvision.datasets.ImageFolder(str(args.data_dir), transform=transform)
    return images, len(images.classes)


def open_wandb(args: argparse.Namespace, rank: int) -> Any:
    """Rank 0's W&B run (None elsewhere or with --wandb off); all its files stay in OUT/wandb."""
    if args.wandb == "off" or rank != 0:
        return None
    import wandb  # only when asked for: slow to import

    folder = args.out / "wandb"
    for variable in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        os.environ.setdefault(variable, str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    config = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
    return wandb.init(project="sparsebench-ddp-example", dir=str(args.out), mode=args.wandb, config=config)


def train(args: argparse.Namespace, rank: int, device: torch.device) -> None:
    images, classes = dataset(args)
    sampler = DistributedSampler(images, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(images, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = len(loader)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    net = torchvision.models.get_model(args.model, weights=None, num_classes=classes).to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=1e-4)

    run = open_wandb(args, rank)
    # sparsebench: the hook. Every rank; the optimizer is checked against the method (DGC).
    hook = register_sparsifier(model, args.sparsifier, seed=args.seed, optimizer=optimizer,
                               wandb_run=run, **args.knobs)

    step, checkpoint = 0, args.out / f"checkpoint.rank{rank}.pt"
    if args.resume:
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        hook.load_state_dict(state["hook"])  # sparsebench: residual, method state, step count
        step = state["step"]
        if run is not None:  # W&B's row is the resumed step: the hook's uncommitted stats join it
            run.log({}, step=step, commit=False)
    stats_file = open(args.out / "stats.jsonl", "a" if args.resume else "w") if rank == 0 else None
    try:
        while step < args.steps:
            epoch, done = divmod(step, steps_per_epoch)
            sampler.set_epoch(epoch)
            hook.start_epoch(epoch, steps_per_epoch)  # sparsebench: DGC's warm-up follows epochs
            for x, y in itertools.islice(loader, done, None):  # a resumed epoch skips what it did
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=True)
                hook.set_learning_rate(optimizer.param_groups[0]["lr"])  # sparsebench: Accordion's LR rule
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()  # DDP runs the hook here: param.grad holds the sparse aggregate
                optimizer.step()
                loss = loss.detach().clone()
                dist.all_reduce(loss)  # the mean loss over ranks, not rank 0's alone
                # sparsebench: this step's traffic, density, times, residual (keys: docs/metrics.md)
                row = {**hook.stats, "step": step, "epoch": epoch, "loss": loss.item() / dist.get_world_size()}
                if stats_file is not None:
                    stats_file.write(json.dumps(row) + "\n")
                    stats_file.flush()
                    if step % 10 == 0 or step == args.steps - 1:
                        print(f"step {step:>5}  loss {row['loss']:.4f}  sent {row['traffic/sent_bytes_max'] / 1e6:.3f} MB "
                              f"({row['traffic/ratio']:.4f} of dense)  density {row['density/actual']:.5f}  "
                              f"select {row['hook/select_ms']:.1f} ms", flush=True)
                if run is not None:  # the hook logged sparsebench/* uncommitted: this commits the row
                    # commit=True: with step= alone W&B waits for the next step, and the hook's next
                    # stats would overwrite these before they are committed.
                    run.log({"train/loss": row["loss"], "train/epoch": epoch}, step=step, commit=True)
                step += 1
                if step == args.steps:
                    break
        state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                 "hook": hook.state_dict(), "step": step}  # sparsebench: the hook's state, per rank
        torch.save(state, checkpoint.with_suffix(".tmp"))
        os.replace(checkpoint.with_suffix(".tmp"), checkpoint)  # never half a checkpoint
    finally:
        if stats_file is not None:
            stats_file.close()
        if run is not None:
            run.finish()


def main() -> None:
    args = parse_args()
    if args.check:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(minutes=5))
    try:
        train(args, dist.get_rank(), device)
    except ConfigError as error:  # e.g. dgc with momentum: one line, no traceback
        fail(str(error))
    finally:
        # DDP keeps reference cycles: collect the model while the process group still exists (at
        # the interpreter's exit, a reducer with unused parameters can abort the process).
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
