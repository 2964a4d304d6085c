"""memory.png: per-process curves over iterations, epoch boundaries marked, verdicts in the legend.

Drawn with matplotlib's Agg canvas directly (no pyplot), so it never touches the user's backend
or needs a display. matplotlib is imported when a plot is drawn, not when the plugin is
registered: most processes that import mmdet_ext (DataLoader workers, tools) never draw.
"""
import gc
from pathlib import Path
from typing import Dict, List, Union

import numpy as np

from .record import CUDA, MAIN, TOTAL, MemoryRecord
from .verdict import LEAK, SAWTOOTH, Verdict

_VERDICT_COLOURS = {LEAK: 'tab:red', SAWTOOTH: 'tab:orange'}


def _lives(s: Dict[str, list]) -> List[np.ndarray]:
    """Index arrays of the consecutive samples that share a pid (one worker life each)."""
    pid = np.asarray(s['pid'])
    cuts = np.flatnonzero(pid[1:] != pid[:-1]) + 1
    return np.split(np.arange(len(pid)), cuts)


def _draw(ax, s: Dict[str, list], field: str, label: str, from_start: bool = False,
          **style) -> None:
    """One curve, broken where the pid changes so a worker restart shows as a new segment.

    With ``from_start`` each segment is drawn relative to its first value (growth in the life).
    """
    x = np.asarray(s['iter'])
    y = np.asarray(s[field])
    line = None
    for idx in _lives(s):
        kwargs = dict(style, label=label) if line is None else dict(style, color=line.get_color())
        (line,) = ax.plot(x[idx], y[idx] - y[idx[0]] if from_start else y[idx], **kwargs)


def _legend(ax, verdicts: Dict[str, Verdict]) -> None:
    legend = ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=8,
                       borderaxespad=0.0)
    for text in legend.get_texts():
        label = text.get_text().split(' ')[0]
        verdict = verdicts.get(label)
        if verdict is not None and verdict.verdict in _VERDICT_COLOURS:
            text.set_color(_VERDICT_COLOURS[verdict.verdict])
            text.set_fontweight('bold')


def plot_record(record: MemoryRecord, verdicts: List[Verdict], path: Union[str, Path],
                title: str = 'mmdet_ext memory watch') -> Path:
    """Draw ``record`` to a PNG at ``path``.

    Panels: the main process (RSS, anonymous RSS, USS, PSS) and the job's total PSS; each child's
    USS (DataLoader workers by name) and its anonymous RSS growth since the worker started
    (dashed: flat for copy-on-write, rising for a leak), a new segment per worker life; CUDA
    allocated / reserved / peak when present. Dotted vertical lines are epoch starts. Legend
    entries carry the verdict, in red for a leak and orange for a sawtooth.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    by_label = {v.label: v for v in verdicts}
    workers = sorted(k for k in record.series if k not in (MAIN, CUDA, TOTAL))
    panels = ['main'] + (['workers'] if workers else []) + ([CUDA] if CUDA in record.series else [])
    fig = Figure(figsize=(13, 3.2 * len(panels)), dpi=100)
    canvas = FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]

    def tag(label: str) -> str:
        v = by_label.get(label)
        return f'{label} [{v.verdict}]' if v is not None else label

    for ax, panel in zip(axes, panels):
        if panel == 'main' and MAIN in record.series:
            s = record.series[MAIN]
            _draw(ax, s, 'rss', f'{tag(MAIN)} RSS', color='tab:blue')
            _draw(ax, s, 'anon', f'{MAIN} anon RSS', color='tab:blue', linestyle='--')
            _draw(ax, s, 'uss', f'{MAIN} USS', color='tab:green')
            _draw(ax, s, 'pss', f'{MAIN} PSS', color='tab:purple')
            if TOTAL in record.series:
                _draw(ax, record.series[TOTAL], 'pss', 'total PSS (main + children)',
                      color='black', linewidth=1.5)
            ax.set_title('main process (and job total)', fontsize=9)
        elif panel == 'workers':
            for i, label in enumerate(workers):
                colour = f'C{i % 10}'
                _draw(ax, record.series[label], 'uss', f'{tag(label)} USS', color=colour)
                _draw(ax, record.series[label], 'anon', f'{label} allocated since start',
                      from_start=True, color=colour, linestyle='--', linewidth=1)
            ax.set_title('DataLoader workers and other children: USS, and anonymous RSS growth '
                         'since the worker started (dashed); a new segment = a restart',
                         fontsize=9)
        elif panel == CUDA:
            s = record.series[CUDA]
            for field, colour in (('allocated', 'tab:blue'), ('reserved', 'tab:orange'),
                                  ('peak', 'tab:gray')):
                label = f'{tag(CUDA)} {field}' if field == 'allocated' else f'{CUDA} {field}'
                _draw(ax, s, field, label, color=colour)
            ax.set_title('CUDA caching allocator', fontsize=9)
        ax.set_ylabel('MiB')
        ax.grid(alpha=0.3)
        for epoch, start in sorted(record.epoch_starts.items()):
            ax.axvline(start, color='gray', linestyle=':', linewidth=1)
            if ax is axes[0]:
                ax.annotate(f'ep {epoch + 1}', (start, 1.0), xycoords=('data', 'axes fraction'),
                            fontsize=7, color='gray', va='bottom', ha='left')
        if ax.get_legend_handles_labels()[0]:
            _legend(ax, by_label)
    axes[-1].set_xlabel('iteration')
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    # A figure is a web of reference cycles holding its pixel buffer; only a full gc pass frees
    # it, and waiting for Python to run one grew the main process ~4 MiB per plot (measured):
    # the watch must not be the leak it reports.
    fig.clear()
    del fig, canvas, axes
    gc.collect()
    return path
