# A short from-scratch schedule: AdamW is far more forgiving than SGD without pretrained weights.
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs, val_interval=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[9, 11],
         gamma=0.1),
]
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=10.0))
auto_scale_lr = dict(base_batch_size=4)
