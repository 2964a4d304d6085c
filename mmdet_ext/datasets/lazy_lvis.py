"""LVIS v1 instance segmentation served from the memory-mapped annotation store."""
from mmdet.datasets import LVISV1Dataset

from ..registry import DATASETS
from .lazy_coco import LazyCocoDataset


@DATASETS.register_module()
class LazyLVISV1Dataset(LazyCocoDataset):
    """Drop-in for mmdet's ``LVISV1Dataset`` on the annotation store of ``LazyCocoDataset``.

    The same samples as ``LVISV1Dataset`` (``img_path``, ``img_id``, ``height``, ``width``,
    ``instances`` with ``bbox``, ``bbox_label``, ``ignore_flag``, ``mask``), in the same order,
    with the same ``filter_cfg`` rules; everything else (store, validation, bad samples, copy
    safety) as ``LazyCocoDataset``. What mmdet does, and so do we:

    - file names: LVIS v1 images carry ``coco_url`` and no ``file_name``; the name is
      ``coco_url.replace('http://images.cocodataset.org/', '')`` (e.g. ``train2017/0000...jpg``,
      so ``data_prefix=dict(img='')`` with ``data_root`` at the COCO folder). The store records
      that derived name (``open_store(image_names='coco_url')``, a store of its own);
    - categories: all categories of the json, in json order (``lvis.get_cat_ids()``), whatever
      ``metainfo['classes']`` says; ``bbox_label`` is the index in that order;
    - ``filter_cfg``: ``CocoDataset.filter_data``'s rules (``filter_empty_gt`` keeps images with
      any annotation of a category of the json; ``min_size``), not applied in ``test_mode``;
    - instances are made by ``CocoDataset.parse_data_info``'s rules, so samples carry no
      ``neg_category_ids`` / ``not_exhaustive_category_ids`` (mmdet 3.3 leaves them out too;
      ``LVISMetric`` reads them from the json).
    """

    METAINFO = LVISV1Dataset.METAINFO
    IMAGE_NAMES = 'coco_url'

    def _selected_category_ids(self) -> list[int]:
        # lvis.get_cat_ids(): the keys of a dict filled in json order (a repeated id keeps its
        # first position).
        return list(dict.fromkeys(int(cat_id) for cat_id in self.store['category_ids']))
