# mmdet's Mask R-CNN, shrunk to train from scratch on 2 CPU cores in minutes: ResNet-18 with no
# pretrained weights (nothing may be downloaded), 64-channel FPN and heads, a one-conv mask head,
# fewer proposals and RoIs. The mask head dominates CPU time at mmdet's sizes (4 convs x 256 ch on
# every positive RoI), so it is cut hardest.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'

num_classes = 4
channels = 64
model = dict(
    # Takes fast_collate's padded uint8 batch; the same tensors as mmdet's DetDataPreprocessor.
    data_preprocessor=dict(type='FastDetDataPreprocessor'),
    backbone=dict(depth=18, frozen_stages=-1, norm_eval=False, init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512], out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(in_channels=channels, fc_out_channels=256, num_classes=num_classes),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(num_convs=1, in_channels=channels, conv_out_channels=channels,
                       num_classes=num_classes)),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=300), rcnn=dict(max_per_img=50)))
