"""Tests for the synthetic toy COCO generator, with pycocotools as the reference decoder."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from mmdet_ext.toy_data import (  # noqa: E402
    CATEGORIES,
    IMAGE_KINDS,
    SPLITS,
    compressed_rle,
    make_toy_coco,
    mask_to_polygons,
    uncompressed_rle,
)

VARIANTS = ("", "_pngmasks")


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a > 0, b > 0
    return float((a & b).sum() / (a | b).sum())


def _has_enclosed_hole(mask: np.ndarray) -> bool:
    """True if some 0 pixel has a 1 pixel on each side along its row and its column."""
    m = mask > 0
    left = np.maximum.accumulate(m, axis=1)
    right = np.maximum.accumulate(m[:, ::-1], axis=1)[:, ::-1]
    up = np.maximum.accumulate(m, axis=0)
    down = np.maximum.accumulate(m[::-1], axis=0)[::-1]
    return bool((~m & left & right & up & down).any())


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset large enough to hold every kind of annotation (40 train / 12 val images)."""
    root = tmp_path_factory.mktemp("toy_coco")
    make_toy_coco(root, num_train=40, num_val=12, seed=0)
    return root


def _coco(root: Path, split: str, variant: str = "") -> COCO:
    return COCO(str(root / "annotations" / f"instances_{split}{variant}.json"))


def test_same_arguments_give_identical_files(tmp_path: Path) -> None:
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        make_toy_coco(tmp_path / name, num_train=12, num_val=4, seed=seed)
    first, second, other = (_file_hashes(tmp_path / name) for name in "abc")
    assert len(first) > 16 + 4
    assert first == second
    for name in ("train/000000.jpg", "val/000000.jpg", "annotations/instances_train.json"):
        assert first[name] != other[name]


def test_images_do_not_depend_on_split_sizes(tmp_path: Path) -> None:
    make_toy_coco(tmp_path / "small", num_train=2, num_val=1)
    make_toy_coco(tmp_path / "large", num_train=5, num_val=3)
    small, large = _file_hashes(tmp_path / "small"), _file_hashes(tmp_path / "large")
    for name in ("train/000000.jpg", "train/000001.jpg", "val/000000.jpg"):
        assert small[name] == large[name]


def test_summary_counts_match_files(tmp_path: Path) -> None:
    summary = make_toy_coco(tmp_path, num_train=3, num_val=2)
    for split, num_images in zip(SPLITS, (3, 2)):
        data = json.loads(Path(summary[split]["json"]).read_text())
        crowd = sum(ann["iscrowd"] for ann in data["annotations"])
        assert summary[split]["images"] == len(data["images"]) == num_images
        assert summary[split]["crowd"] == crowd
        assert summary[split]["instances"] == len(data["annotations"]) - crowd
        assert sum(summary[split]["per_category"].values()) == summary[split]["instances"]
        assert Path(summary[split]["png_json"]).is_file()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("split", SPLITS)
def test_json_loads_and_images_decode(toy_root: Path, split: str, variant: str) -> None:
    coco = _coco(toy_root, split, variant)
    assert [(c["id"], c["name"]) for c in coco.dataset["categories"]] == list(
        enumerate(CATEGORIES, start=1)
    )
    assert coco.dataset["info"]["seed"] == 0
    assert sorted(coco.imgs) == list(range(1, len(coco.imgs) + 1))
    assert sorted(coco.anns) == list(range(1, len(coco.anns) + 1))
    for image in coco.imgs.values():
        decoded = cv2.imread(str(toy_root / split / image["file_name"]), cv2.IMREAD_COLOR)
        assert decoded is not None
        assert decoded.shape == (image["height"], image["width"], 3)


@pytest.mark.parametrize("split", SPLITS)
def test_annotations_match_visible_masks(toy_root: Path, split: str) -> None:
    coco, png_coco = _coco(toy_root, split), _coco(toy_root, split, "_pngmasks")
    for ann in coco.dataset["annotations"]:
        png_ann = png_coco.anns[ann["id"]]
        mask = coco.annToMask(ann)
        rows, cols = np.nonzero(mask)
        assert mask.sum() > 0
        tight = [cols.min(), rows.min(), cols.max() - cols.min() + 1, rows.max() - rows.min() + 1]
        np.testing.assert_allclose(ann["bbox"], tight, atol=2)
        if ann["iscrowd"]:
            assert png_ann == ann
            assert ann["area"] == mask.sum()
            continue
        assert "segmentation" not in png_ann and png_ann == {
            **{k: v for k, v in ann.items() if k != "segmentation"},
            "mask_file": f"masks/{split}/{ann['image_id']}_{ann['id']}.png",
        }
        png = cv2.imread(str(toy_root / png_ann["mask_file"]), cv2.IMREAD_UNCHANGED)
        image = coco.imgs[ann["image_id"]]
        assert png.dtype == np.uint8 and png.shape == (image["height"], image["width"])
        assert set(np.unique(png).tolist()) == {0, 255}
        assert ann["area"] == np.count_nonzero(png)
        assert _iou(mask, png) > 0.8, ann


def test_dataset_has_every_kind_of_annotation(toy_root: Path) -> None:
    train, val = _coco(toy_root, "train"), _coco(toy_root, "val")
    anns = train.dataset["annotations"] + val.dataset["annotations"]
    polygons = [ann for ann in anns if not ann["iscrowd"]]
    assert {ann["category_id"] for ann in polygons} == {1, 2, 3, 4}
    assert any(len(ann["segmentation"]) > 1 for ann in polygons)
    rings = [a for a in train.dataset["annotations"] if a["category_id"] == 4 and not a["iscrowd"]]
    assert any(_has_enclosed_hole(train.annToMask(ann)) for ann in rings)
    train_crowd = [ann for ann in train.dataset["annotations"] if ann["iscrowd"]]
    val_crowd = [ann for ann in val.dataset["annotations"] if ann["iscrowd"]]
    assert train_crowd and all(isinstance(a["segmentation"]["counts"], str) for a in train_crowd)
    assert val_crowd and all(isinstance(a["segmentation"]["counts"], list) for a in val_crowd)
    for coco in (train, val):
        for ann in coco.dataset["annotations"]:
            image = coco.imgs[ann["image_id"]]
            if ann["iscrowd"]:
                assert ann["segmentation"]["size"] == [image["height"], image["width"]]
            else:
                assert max(max(p[0::2]) for p in ann["segmentation"]) <= image["width"]
                assert max(max(p[1::2]) for p in ann["segmentation"]) <= image["height"]


@pytest.mark.parametrize("split", SPLITS)
def test_every_six_images_hold_every_kind_of_image(toy_root: Path, split: str) -> None:
    """Landscape, portrait, square and wide images for aspect-ratio grouping, one without
    annotations for filter_empty_gt, one under min_size=32; each kind every 6 images."""
    coco = _coco(toy_root, split)
    images = [coco.imgs[image_id] for image_id in sorted(coco.imgs)]
    num_anns = [len(coco.getAnnIds(imgIds=[image["id"]])) for image in images]
    assert len(images) >= 2 * len(IMAGE_KINDS)
    for index, (image, count) in enumerate(zip(images, num_anns)):
        width, height, with_objects = IMAGE_KINDS[index % len(IMAGE_KINDS)]
        assert (image["width"], image["height"]) == (width, height)
        assert (count > 0) == with_objects, image
    first = images[: len(IMAGE_KINDS)]
    assert {image["width"] > image["height"] for image in first} == {True, False}
    assert any(image["width"] == image["height"] for image in first)
    assert any(min(image["width"], image["height"]) < 32 for image in first)
    assert 0 in num_anns[: len(IMAGE_KINDS)]


def test_a_given_size_is_every_image_size(tmp_path: Path) -> None:
    make_toy_coco(tmp_path, num_train=len(IMAGE_KINDS), num_val=1, width=64, height=48)
    coco = _coco(tmp_path, "train")
    assert {(image["width"], image["height"]) for image in coco.imgs.values()} == {(64, 48)}
    assert all(coco.getAnnIds(imgIds=[image_id]) for image_id in coco.imgs)
    with pytest.raises(ValueError, match="both width and height"):
        make_toy_coco(tmp_path / "half", num_train=1, num_val=1, width=64)


def _ring_mask() -> np.ndarray:
    mask = np.zeros((60, 80), np.uint8)
    cv2.circle(mask, (40, 30), 22, 1, -1)
    cv2.circle(mask, (40, 30), 11, 0, -1)
    return mask


@pytest.mark.parametrize(
    "mask",
    [
        _ring_mask(),
        np.pad(np.ones((5, 6), np.uint8), ((3, 4), (7, 2))),
        np.kron(np.eye(3, dtype=np.uint8), np.ones((4, 4), np.uint8)),  # touching at corners
    ],
    ids=["ring", "small-rectangle", "diagonal-blocks"],
)
def test_polygons_rasterise_back_to_the_mask(mask: np.ndarray) -> None:
    polygons = mask_to_polygons(mask)
    decoded = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polygons, *mask.shape)))
    assert _iou(decoded, mask) > 0.97
    assert _has_enclosed_hole(decoded) == _has_enclosed_hole(mask)


def test_ring_is_one_keyhole_polygon() -> None:
    polygons = mask_to_polygons(_ring_mask())
    assert len(polygons) == 1 and len(polygons[0]) % 2 == 0


@pytest.mark.parametrize("first_pixel", [0, 1])
def test_rle_encoders_match_pycocotools(first_pixel: int) -> None:
    mask = (np.random.default_rng(first_pixel).random((17, 23)) > 0.6).astype(np.uint8)
    mask[0, 0] = first_pixel
    reference = mask_utils.encode(np.asfortranarray(mask))
    assert compressed_rle(mask) == {"size": [17, 23], "counts": reference["counts"].decode()}
    rle = uncompressed_rle(mask)
    assert (rle["counts"][0] == 0) == bool(first_pixel)
    assert sum(rle["counts"]) == mask.size
    assert mask_utils.frPyObjects(rle, 17, 23) == reference
    np.testing.assert_array_equal(mask_utils.decode(compressed_rle(mask)), mask)


def test_cli_writes_the_dataset(tmp_path: Path) -> None:
    out = tmp_path / "toy"
    command = [sys.executable, "tools/make_toy_coco.py", "--out", str(out)]
    command += ["--num-train", "4", "--num-val", "2"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "train: 4 images" in result.stdout and "val: 2 images" in result.stdout
    for split, num_images in (("train", 4), ("val", 2)):
        assert len(list((out / split).glob("*.jpg"))) == num_images
        assert any((out / "masks" / split).glob("*.png"))
        for variant in VARIANTS:
            assert (out / "annotations" / f"instances_{split}{variant}.json").is_file()
