# mmdet's default runtime plus the plugin: what a user adds to adopt mmdet_ext from a config.
_base_ = 'mmdet::_base_/default_runtime.py'

custom_imports = dict(imports=['mmdet_ext'], allow_failed_imports=False)

custom_hooks = [
    # Every checkpoint load (load_from, resume, pretrained init_cfg) goes to CPU, weights_only-safe;
    # auto-resume skips truncated/corrupt checkpoints.
    dict(type='CpuCheckpointLoadHook'),
    # RNG and sampler state travel in the checkpoint, so a resumed run repeats itself.
    dict(type='ExactResumeHook'),
    # Samples the main process, every DataLoader worker and CUDA, logs leak / sawtooth verdicts,
    # writes memory.json + memory.png to the work dir (docs/memory_watch.md), and stops the run,
    # report written, before the job's memory passes 90% of the machine's.
    dict(type='MemoryWatchHook', max_memory_fraction=0.9),
    # DataLoader workers: at most the usable CPUs per rank, OpenCV threads off inside them, and,
    # where a dataloader sets none, a timeout so a stuck worker raises and pin_memory with CUDA.
    dict(type='WorkerDefaultsHook'),
    # inflight_<pid>.txt (the sample each loading process is on) deleted when the run ends
    # normally; kept after a death or hang, where they name the sample.
    dict(type='InflightCleanupHook'),
    # SIGTERM / SIGUSR1 (preemption): finish the iteration, save iter_N.pth on all ranks, exit
    # 75; --resume continues at the next batch (docs/hangs_and_resume.md).
    dict(type='SignalCheckpointHook'),
    # No iteration for max(600 s, 20 x the median iteration time): hang_report.txt in the work
    # dir (stuck worker, its sample and stack, the main stacks), then HangDetected ends the run.
    dict(type='HangWatchdogHook', min_timeout=600, k=20, on_hang='raise'),
]

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    # Crash-proof saves: temp file + fsync + atomic rename; pointer and pruning after the save.
    checkpoint=dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=3))
