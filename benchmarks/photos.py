"""Real photographs for the data-path benchmarks, from a registry package: the colour photos that
the scikit-image wheel ships in ``skimage/data`` (astronaut, cat, coffee, motorcycles, rocket,
Hubble deep field, retina, IHC stain), read straight from the wheel file, not installed; where
there is no wheel (a machine without internet), from an installed scikit-image's ``skimage/data``
folder, which holds the same files (0.25.2's and 0.26.0's: all nine, identical pixels).

Get the wheel once (a benchmark-only download; nothing in the project needs it):

    pip download scikit-image==0.26.0 --no-deps -d ~/.cache/mmdet_ext/photos

Each benchmark image is a random 4:3 crop (at least 60% of the photo's side) of one of them,
flipped at random, resized to the benchmark's size (``INTER_AREA`` down, ``INTER_CUBIC`` up) with
mild sensor-like grain (sigma 3), saved as a quality-90 JPEG. The photos are 300 to 1411 px on a
side: at 640x480 that is real photo content; at 2560x1920 it is upscaled, smoother than a real
5-megapixel photo, so it decodes somewhat faster than one would.
"""
import glob
import importlib.util
import os
import zipfile
from pathlib import Path

import cv2
import numpy as np

PHOTO_DIR = Path(os.path.expanduser('~/.cache/mmdet_ext/photos'))
PHOTOS = ('astronaut.png', 'chelsea.png', 'coffee.png', 'motorcycle_left.png',
          'motorcycle_right.png', 'rocket.jpg', 'hubble_deep_field.jpg', 'retina.jpg', 'ihc.png')
GET_WHEEL = f'pip download scikit-image==0.26.0 --no-deps -d {PHOTO_DIR}'


def photo_source(directory: Path = PHOTO_DIR) -> Path | None:
    """Where the photos are read from: the newest scikit-image wheel in ``directory``, else the
    ``skimage/data`` folder of an installed scikit-image that has any of them (found without
    importing it), else None."""
    wheels = sorted(glob.glob(str(directory / 'scikit_image-*.whl')))
    if wheels:
        return Path(wheels[-1])
    spec = importlib.util.find_spec('skimage')
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(list(spec.submodule_search_locations)[0]) / 'data'
    return data if any((data / name).is_file() for name in PHOTOS) else None


def load_photos(directory: Path = PHOTO_DIR) -> list[np.ndarray]:
    """The colour photographs of ``photo_source(directory)``, as BGR arrays: all of PHOTOS from a
    wheel, those of PHOTOS that an installed scikit-image has."""
    source = photo_source(directory)
    if source is None:
        raise SystemExit(f'No scikit-image wheel in {directory} and no installed scikit-image: '
                         f'run `{GET_WHEEL}` once (or pass --content synthetic)')
    if source.suffix == '.whl':
        with zipfile.ZipFile(source) as wheel:
            return [cv2.imdecode(np.frombuffer(wheel.read(f'skimage/data/{name}'), np.uint8),
                                 cv2.IMREAD_COLOR) for name in PHOTOS]
    return [cv2.imread(str(source / name), cv2.IMREAD_COLOR) for name in PHOTOS
            if (source / name).is_file()]


def photo_crop(photos: list[np.ndarray], rng: np.random.Generator, width: int,
               height: int) -> np.ndarray:
    """A random 4:3 crop of a random photo, at width x height, with grain."""
    photo = photos[rng.integers(len(photos))]
    ph, pw = photo.shape[:2]
    crop_w = int(min(pw, ph * width / height) * rng.uniform(0.6, 1.0))
    crop_h = int(crop_w * height / width)
    x0, y0 = rng.integers(0, pw - crop_w + 1), rng.integers(0, ph - crop_h + 1)
    crop = photo[y0:y0 + crop_h, x0:x0 + crop_w]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    interpolation = cv2.INTER_AREA if crop_w > width else cv2.INTER_CUBIC
    image = cv2.resize(np.ascontiguousarray(crop), (width, height),
                       interpolation=interpolation).astype(np.float32)
    image += rng.normal(0, 3, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)
