"""Find tensors with autograd history that outlive their iteration (the loss without ``.item()``).

A loss tensor carries its ``grad_fn`` and, through it, every activation of the forward pass. The
Runner drops an iteration's outputs when the iteration ends, so such a tensor that is still alive
later is kept by someone (``self.losses.append(loss)``), and the whole graph with it. The check
holds only weak references, so it cannot be the one keeping them.
"""
import weakref
from typing import Any, Dict, Iterator, List, Tuple

import torch


def _tensors(value: Any, key: str, depth: int = 0) -> Iterator[Tuple[str, torch.Tensor]]:
    """(dotted key, tensor) for tensors in ``value``, looking into dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield key, value
    elif depth < 3 and isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f'{key}.{k}' if key else str(k), depth + 1)
    elif depth < 3 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:16]):
            yield from _tensors(v, f'{key}[{i}]', depth + 1)


def _has_history(tensor: torch.Tensor) -> bool:
    return tensor.grad_fn is not None


class KeptGraphDetector:
    """Watches iteration outputs and MessageHub runtime info for tensors that keep a graph alive.

    Args:
        grace_iters: how many iterations an output tensor may outlive its own iteration before
            it counts as kept (1 tolerates anything that holds the previous iteration's outputs).
    """

    def __init__(self, grace_iters: int = 1) -> None:
        if grace_iters < 1:
            raise ValueError(f'grace_iters must be >= 1, got {grace_iters}')
        self.grace_iters = grace_iters
        self._watched: List[Tuple[int, str, weakref.ref, str]] = []
        self._reported: set = set()

    def watch_outputs(self, iteration: int, outputs: Any) -> None:
        """Start watching the tensors with autograd history in an iteration's outputs."""
        for key, tensor in _tensors(outputs, 'outputs'):
            if _has_history(tensor) and key not in self._reported:
                self._watched.append(
                    (iteration, key, weakref.ref(tensor), type(tensor.grad_fn).__name__))

    def check(self, iteration: int, runtime_info: Dict[str, Any]) -> List[str]:
        """Warnings (each key once per run) for tensors still alive past the grace period and for
        tensors with history stored in MessageHub runtime info."""
        warnings = []
        still_watched = []
        for born, key, ref, grad_fn in self._watched:
            if ref() is None:
                continue
            if iteration - born <= self.grace_iters:
                still_watched.append((born, key, ref, grad_fn))
            elif key not in self._reported:
                self._reported.add(key)
                warnings.append(
                    f'{key} from iteration {born} (a tensor with grad_fn={grad_fn}) is still '
                    f'alive {iteration - born} iterations later: something keeps it, and with '
                    f'it its whole autograd graph. Keep loss.item() or loss.detach() instead.')
        self._watched = still_watched
        for name, value in runtime_info.items():
            for key, tensor in _tensors(value, f'message_hub.runtime_info[{name!r}]'):
                if _has_history(tensor) and key not in self._reported:
                    self._reported.add(key)
                    warnings.append(
                        f'{key} holds a tensor with autograd history '
                        f'(grad_fn={type(tensor.grad_fn).__name__}): it stays alive with its '
                        f'graph until overwritten. Store .item() or .detach() instead.')
        return warnings
