# The main job: Mask R-CNN (ResNet-18, from scratch) on the embedded toy COCO data, on CPU,
# evaluated with mmdet's CocoMetric (bbox + segm), checkpointed every epoch, resumable.
_base_ = [
    '_base_/models/mask-rcnn_r18_fpn_toy.py',
    '_base_/datasets/toy_coco_instance.py',
    '_base_/schedules/toy_schedule.py',
    '_base_/mmdet_ext_runtime.py',
]

# CPU-only machines have no NCCL; gloo works for CPU and GPU launches alike.
env_cfg = dict(dist_cfg=dict(backend='gloo'))
