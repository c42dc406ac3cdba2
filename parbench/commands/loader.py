"""`parbench loader`: the images a second this host's CPU cores decode and augment for training
(torchvision's reference ImageNet transforms), per core and through DataLoader workers."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

from parbench.commands.arguments import UsageError, at_least, int_list, positive
from parbench.machine.devices import cpu_cores
from parbench.machine.environment import collect_environment, cpu_model
from parbench.measure import image_folder
from parbench.measure.loader import (
    APIS,
    DECODE,
    LoaderError,
    LoaderRates,
    Rates,
    Repeat,
    decoder_provenance,
    describe_transforms,
    measure_in_rounds,
    open_dataset,
    training_transforms,
)

__all__ = ["command_loader", "parse_pixels"]

DEFAULT_IMAGES = 512
REFERENCE = ("torchvision's references/classification/presets.py, ClassificationPresetTrain "
             "with its defaults (the reference ImageNet training script's)")


def parse_pixels(flag: str, text: str) -> tuple[int, int]:
    """(width, height) from `500x375`, each side 8 to 8192 pixels."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    size = (int(match.group(1)), int(match.group(2))) if match else None
    if size is None or not all(8 <= side <= 8192 for side in size):
        raise UsageError(f"{flag} {text!r} is not a picture size; give WIDTHxHEIGHT in pixels, "
                         "each side 8 to 8192, e.g. 500x375")
    return size


def _writable_json(into: str) -> Path:
    """The JSON file --into names: FILE, or loader.json in a folder (a run folder)."""
    path = Path(into)
    path = path / "loader.json" if path.is_dir() else path
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise UsageError(f"--into {into}: cannot write {path} (no such folder, or not "
                         "writable); give a file in a writable folder, or a run folder")
    return path


def _folder(args: argparse.Namespace, settings: dict, scratch: Path) -> tuple[Path, dict]:
    """The folder measured and what the JSON says of it: --data's as it is, else JPEGs
    written into --folder or `scratch`."""
    if args.data:
        if args.images is not None or args.folder:
            raise UsageError("--data measures a folder as it is; drop --images and --folder, "
                             "which write a synthetic one")
        return Path(args.data), {"synthetic": False, "jpeg_quality": None}
    images = at_least("--images", DEFAULT_IMAGES if args.images is None else args.images, 1)
    nominal = parse_pixels("--jpeg-size", args.jpeg_size)
    quality = args.jpeg_quality
    if not 1 <= quality <= 95:
        raise UsageError(f"--jpeg-quality must be 1 to 95 (Pillow's useful range), got {quality}")
    root = Path(args.folder) if args.folder else scratch
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"--folder {root} exists and is not an empty folder; give a new one, "
                         f"or measure it as it is with --data {root}")
    _check_batches(images, settings)
    print(f"writing {images} synthetic JPEGs into {root} ...", flush=True)
    try:
        image_folder.write_image_folder(root, images, min(10, images), nominal, quality)
    except OSError as error:
        raise UsageError(f"cannot write images to {root} ({error.strerror or error}); choose a "
                         "writable folder with --folder") from None
    return root, {"synthetic": True, "jpeg_quality": quality,
                  "nominal_size_px": f"{nominal[0]}x{nominal[1]}", "sizes": image_folder.SIZES,
                  "content": image_folder.CONTENT}


def _checked_settings(args: argparse.Namespace) -> dict:
    return {"crop_size": at_least("--crop-size", args.crop_size, 1),
            "workers": sorted(set(int_list("--workers", args.workers, 0))) if args.workers
            else sorted({1, cpu_cores()}),
            "batch_size": at_least("--batch-size", args.batch_size, 1),
            "repeats": at_least("--repeats", args.repeats, 1),
            "seconds": positive("--seconds", args.seconds),
            "warmup": at_least("--warmup", args.warmup, 0)}


def _check_batches(images: int, settings: dict) -> None:
    """Refuse an epoch of fewer batches than workers: some would never work."""
    batches = -(-images // settings["batch_size"])
    if batches < max(settings["workers"]):
        raise UsageError(f"{images} images make {batches} batches of {settings['batch_size']} "
                         f"an epoch, fewer than {max(settings['workers'])} workers; give more "
                         "images or a smaller --batch-size")


def _line(round_index: int, name: str, repeat: Repeat, rounds: int) -> None:
    print(f"round {round_index}/{rounds}, {name}: {repeat.images} images in "
          f"{repeat.seconds:.3f} s = {repeat.images_per_s:.1f} images/s", flush=True)


def _describe(facts: dict) -> str:
    width, height = facts["width_px"], facts["height_px"]
    kind = ("synthetic JPEGs" if facts["synthetic"] else "images")
    quality = f", JPEG quality {facts['jpeg_quality']}" if facts["jpeg_quality"] else ""
    return (f"{facts['images']} {kind} in {facts['classes']} classes, widths {width['min']} to "
            f"{width['max']} px (mean {width['mean']:.0f}), heights {height['min']} to "
            f"{height['max']} (mean {height['mean']:.0f}){quality}, mean file "
            f"{facts['mean_file_bytes'] / 1000:.1f} KB (ImageNet's: about "
            f"{image_folder.IMAGENET_MEAN_FILE_BYTES // 1000} KB)")


def _measure(args, settings: dict, root: Path, facts: dict) -> dict:
    pipeline = training_transforms(settings["crop_size"], args.transforms)
    dataset = open_dataset(root, pipeline)
    facts.update(image_folder.describe_folder(root).as_dict())
    _check_batches(len(dataset), settings)
    decoder = decoder_provenance()
    print(f"images: {_describe(facts)}\ndecode: {DECODE}; Pillow {decoder['pil_version']}"
          f"{' (PIL-SIMD)' if decoder['pil_simd'] else ''}, libjpeg-turbo "
          f"{decoder['libjpeg_turbo_version'] if decoder['libjpeg_turbo'] else 'not in use'}")
    print(f"transforms ({APIS[args.transforms]}, as {REFERENCE}):\n  "
          + "\n  ".join(describe_transforms(pipeline)))
    host = {"cpu_model": cpu_model(), "cpu_cores_available": cpu_cores(),
            "load_average_1min_before": os.getloadavg()[0]}
    print(f"host: {host['cpu_model']}, {host['cpu_cores_available']} cores available, load "
          f"average {host['load_average_1min_before']:.2f}", flush=True)
    for path in image_folder.image_files(root):  # every measurement reads the page cache
        path.read_bytes()
    rounds = settings["repeats"]
    per_core, loaders = measure_in_rounds(
        dataset, settings["workers"], settings["batch_size"], rounds, settings["seconds"],
        settings["warmup"], lambda k, name, repeat: _line(k, name, repeat, rounds))
    return _figures(args, settings, facts, {"decoder": decoder, "host": host},
                    describe_transforms(pipeline), per_core, loaders)


def _scaling(rates: Rates, baseline: Rates) -> dict:
    """Its rate over the baseline's in the same round: the median and range of those ratios."""
    ratios = [mine.images_per_s / theirs.images_per_s
              for mine, theirs in zip(rates.repeats, baseline.repeats, strict=True)]
    return {"scaling": statistics.median(ratios), "scaling_min": min(ratios),
            "scaling_max": max(ratios)}


def _figures(args, settings: dict, facts: dict, provenance: dict, transforms: list[str],
             per_core: Rates, loaders: list[LoaderRates]) -> dict:
    """Every figure and its provenance, as --into writes them."""
    baseline = loaders[0]  # the fewest workers (the list is sorted)
    cores = provenance["host"]["cpu_cores_available"]
    return {
        "pipeline": {"decode": DECODE, "api": APIS[args.transforms], "reference": REFERENCE,
                     "crop_size": settings["crop_size"], "transforms": transforms},
        "images": facts,
        "imagenet_mean_file_bytes": image_folder.IMAGENET_MEAN_FILE_BYTES,
        "rounds": settings["repeats"],
        "per_core": {"processes": 1, "threads": 1, "seconds_per_repeat": settings["seconds"],
                     "warmup_images": settings["warmup"], **per_core.as_dict()},
        "data_loader": {"batch_size": settings["batch_size"], "shuffle": True,
                        "persistent_workers": True, "warmup": "one batch from each worker",
                        "scaling_over_workers": baseline.workers,
                        "runs": [{**rates.as_dict(), **_scaling(rates, baseline)}
                                 for rates in loaders]},
        "implied": {"cores": cores, "images_per_s": per_core.median * cores},
        **provenance,
        "environment": collect_environment(),
    }


def _summary(figures: dict) -> None:
    core, loader = figures["per_core"], figures["data_loader"]
    print(f"\nper core (1 process, 1 thread): {core['images_per_s_median']:.1f} images/s median "
          f"[{core['images_per_s_min']:.1f}, {core['images_per_s_max']:.1f}] over "
          f"{figures['rounds']} rounds of {core['seconds_per_repeat']:g} s")
    fewest = loader["scaling_over_workers"]
    for run in loader["runs"]:
        print(f"DataLoader, batch {loader['batch_size']}, {run['workers']:>2} worker"
              f"{'s' if run['workers'] != 1 else ' '}: {run['images_per_s_median']:.1f} "
              f"images/s [{run['images_per_s_min']:.1f}, {run['images_per_s_max']:.1f}], "
              f"x{run['scaling']:.2f} [{run['scaling_min']:.2f}, {run['scaling_max']:.2f}] "
              f"over {fewest} worker{'s' * (fewest != 1)} in the same round"
              f"{'' if run['every_image_once'] else '; NOT every image once an epoch'}")
    implied = figures["implied"]
    best = max(loader["runs"], key=lambda run: run["images_per_s_median"])
    print(f"{implied['cores']} cores at this rate feed about {implied['images_per_s']:.0f} "
          f"images/s (the DataLoader delivered {best['images_per_s_median']:.0f} with "
          f"{best['workers']} worker{'s' * (best['workers'] != 1)})")
    host = figures["host"]
    if host["load_average_1min_before"] >= 1.0:  # at least a core's worth of other work
        print(f"note: the load average was {host['load_average_1min_before']:.2f} on "
              f"{host['cpu_cores_available']} cores before measuring: other work shared them, "
              "which lowers these rates and widens their ranges")


def command_loader(args: argparse.Namespace) -> int:
    settings = _checked_settings(args)
    into = _writable_json(args.into) if args.into else None
    with tempfile.TemporaryDirectory(prefix="parbench-loader-") as scratch:
        root, facts = _folder(args, settings, Path(scratch) / "images")
        try:
            figures = _measure(args, settings, root, facts)
        except LoaderError as error:
            raise UsageError(str(error)) from None
    _summary(figures)
    if into:
        into.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"written: {into}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench loader`: its parser and arguments."""
    loader = commands.add_parser(
        "loader", help="measure the images a second this host decodes and augments for "
        "training (per core, and through DataLoader workers)",
        description="Decodes JPEGs with PIL and applies torchvision's reference ImageNet "
                    "training transforms (RandomResizedCrop, RandomHorizontalFlip, to a float "
                    "tensor, Normalize): images a second on one core (one process, one thread) "
                    "and through a DataLoader with each worker count, on a synthetic folder it "
                    "writes (nothing is downloaded) or on --data.")
    source = loader.add_argument_group("images")
    source.add_argument("--images", type=int, help=f"synthetic JPEGs to write (default "
                        f"{DEFAULT_IMAGES})")
    source.add_argument("--jpeg-size", default="500x375", metavar="WxH",
                        help="their nominal size; each side varies by up to a tenth and one in "
                             "four is portrait (default 500x375, ImageNet's typical)")
    source.add_argument("--jpeg-quality", type=int, default=image_folder.JPEG_QUALITY,
                        help=f"their JPEG quality (default {image_folder.JPEG_QUALITY})")
    source.add_argument("--folder", metavar="DIR", help="write them into this new or empty "
                        "folder and keep it (default: a temporary folder, removed after)")
    source.add_argument("--data", metavar="DIR", help="measure this image folder instead (one "
                        "subfolder of images per class, as torchvision's ImageFolder reads)")
    loader.add_argument("--crop-size", type=int, default=224,
                        help="RandomResizedCrop's size in pixels (default 224)")
    loader.add_argument("--transforms", choices=sorted(APIS), default="v1",
                        help="torchvision.transforms (v1) or transforms.v2 (default v1, the "
                             "reference script's default)")
    loader.add_argument("--workers", metavar="N[,...]", help="DataLoader worker counts "
                        "(default: 1 and the cores available)")
    loader.add_argument("--batch-size", type=int, default=32, help="images a DataLoader "
                        "batch collates (default 32, the reference script's per GPU)")
    loader.add_argument("--repeats", type=int, default=5, help="rounds, each timing every "
                        "measurement once in a shuffled order: a per-core repeat and an "
                        "epoch per worker count (default 5)")
    loader.add_argument("--seconds", type=float, default=2.0, help="length of each per-core "
                        "repeat (default 2)")
    loader.add_argument("--warmup", type=int, default=10, help="untimed images per core "
                        "first (default 10)")
    loader.add_argument("--into", metavar="FILE", help="write every figure and its "
                        "provenance as JSON to FILE (a folder: FILE/loader.json)")
    loader.set_defaults(handler=command_loader)
