"""Image folders for the input-pipeline measurement: one written here (nothing is downloaded),
JPEGs of ImageNet's typical size whose content compresses like a photograph, one subfolder per
class as torchvision's ImageFolder reads; and what any image folder holds."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from torchvision.datasets.folder import IMG_EXTENSIONS

__all__ = ["CONTENT", "IMAGENET_MEAN_FILE_BYTES", "JPEG_QUALITY", "NOMINAL_SIZE", "SIZES",
           "FolderFacts", "describe_folder", "image_files", "picture", "write_image_folder"]

NOMINAL_SIZE = (500, 375)  # ImageNet's most common size (width x height), landscape
JPEG_QUALITY = 90
IMAGENET_MEAN_FILE_BYTES = 110_000  # ILSVRC-2012 train: its 138 GB tar over 1.28 M files
SIZES = ("each side the nominal size times a factor drawn from 0.9 to 1.1, one image in four "
         "turned portrait")
CONTENT = ("a two-colour gradient, 6 to 13 filled ellipses, rectangles and triangles (edges), "
           "a grey texture (noise at 1/2, 1/4 and 1/8 of the size, its strength varying "
           "smoothly across the picture: smooth regions beside textured ones) and mild "
           "per-pixel noise: a photograph's bytes are its edges and textures, which JPEG "
           "cannot drop, so these files size and decode like photographs; at 500x375 px and "
           "quality 90, uniform noise makes a file of about 170 KB and flat colour one of 4 KB")


@dataclass(frozen=True)
class FolderFacts:
    """What an image folder holds: files, classes, pixel sizes and bytes."""

    root: str
    images: int
    classes: int
    width_px: dict[str, float]  # min, mean, max
    height_px: dict[str, float]
    mean_file_bytes: float
    formats: dict[str, int]

    def as_dict(self) -> dict:
        return asdict(self)


def _spread(values: list[int]) -> dict[str, float]:
    return {"min": min(values), "mean": round(statistics.fmean(values), 1), "max": max(values)}


def image_files(root: Path) -> list[Path]:
    """The files ImageFolder would read under `root`'s class subfolders."""
    return sorted(path for folder in root.iterdir() if folder.is_dir()
                  for path in folder.rglob("*")
                  if path.is_file() and path.suffix.lower() in IMG_EXTENSIONS)


def describe_folder(root: Path) -> FolderFacts:
    """Sizes read from each file's header (no decoding), bytes from the file system."""
    files = image_files(root)
    widths: list[int] = []
    heights: list[int] = []
    formats: Counter[str] = Counter()
    for path in files:
        with Image.open(path) as image:
            widths.append(image.width)
            heights.append(image.height)
            formats[image.format or path.suffix.lower()] += 1
    classes = {path.relative_to(root).parts[0] for path in files}
    return FolderFacts(str(root), len(files), len(classes), _spread(widths), _spread(heights),
                       round(statistics.fmean(p.stat().st_size for p in files), 1),
                       dict(formats))


def _size(rng: np.random.Generator, nominal: tuple[int, int]) -> tuple[int, int]:
    width, height = (max(8, round(side * rng.uniform(0.9, 1.1))) for side in nominal)
    return (height, width) if rng.random() < 0.25 else (width, height)


def _upsampled_noise(rng: np.random.Generator, width: int, height: int, scale: int,
                     sigma: float) -> np.ndarray:
    small = rng.normal(0, sigma, (height // scale + 1, width // scale + 1)).astype(np.float32)
    # a float32 array is a mode "F" image, resized without rounding to 8 bits
    return np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC))


def picture(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """One synthetic photograph-like RGB picture (CONTENT says what it holds)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(angle) * x / width + np.sin(angle) * y / height
    ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-6)
    start, end = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    image = Image.fromarray((start + (end - start) * ramp[..., None]).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(6, 14)):
        x0, y0 = rng.uniform(-0.2, 1.0) * width, rng.uniform(-0.2, 1.0) * height
        x1, y1 = x0 + rng.uniform(0.05, 0.5) * width, y0 + rng.uniform(0.05, 0.5) * height
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = rng.integers(3)
        if shape == 0:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif shape == 1:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            corners = rng.uniform((x0, y0), (x1, y1), (3, 2))
            draw.polygon([(float(cx), float(cy)) for cx, cy in corners], fill=colour)
    pixels = np.asarray(image.filter(ImageFilter.GaussianBlur(1.0))).astype(np.float32)
    strength = np.clip(1.0 + _upsampled_noise(rng, width, height, 32, 0.9), 0.0, 2.5)
    texture = sum(_upsampled_noise(rng, width, height, scale, 40.0) for scale in (2, 4, 8))
    pixels += (strength * texture)[..., None]
    pixels += rng.normal(0, 11.0, pixels.shape).astype(np.float32)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def write_image_folder(root: Path, images: int, classes: int,
                       nominal: tuple[int, int] = NOMINAL_SIZE, quality: int = JPEG_QUALITY,
                       seed: int = 0) -> FolderFacts:
    """`images` JPEGs at `quality`, dealt in turn into `classes` subfolders of `root`; the
    same seed writes the same files."""
    digits = len(str(classes - 1))
    for index in range(images):
        rng = np.random.default_rng((seed, index))
        folder = root / f"class_{index % classes:0{digits}d}"
        folder.mkdir(parents=True, exist_ok=True)
        picture(rng, *_size(rng, nominal)).save(folder / f"image_{index:06d}.jpg", "JPEG",
                                                quality=quality)
    return describe_folder(root)
