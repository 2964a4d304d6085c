"""``capture_rng_state`` / ``restore_rng_state`` and the CUDA generators, on the CPU: a fake
``torch.cuda`` with N devices stands in for the GPUs (torch's own functions index
``torch.cuda.default_generators``, an IndexError past the last device)."""
import pytest
import torch

from mmdet_ext.engine.rng_state import capture_rng_state, restore_rng_state


class FakeCudaGenerators:
    """``count`` CUDA devices, each generator state one byte tensor; ``current`` in use."""

    def __init__(self, count: int, current: int) -> None:
        self.states = [torch.tensor([10 + i], dtype=torch.uint8) for i in range(count)]
        self.current = current

    def _index(self, device) -> int:
        index = device if isinstance(device, int) else torch.device(device).index
        index = self.current if index is None else index
        if index >= len(self.states):
            raise IndexError('list index out of range')  # torch.cuda.default_generators[i]
        return index

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
        monkeypatch.setattr(torch.cuda, 'device_count', lambda: len(self.states))
        monkeypatch.setattr(torch.cuda, 'current_device', lambda: self.current)
        monkeypatch.setattr(torch.cuda, 'get_rng_state',
                            lambda device='cuda': self.states[self._index(device)].clone())
        monkeypatch.setattr(torch.cuda, 'get_rng_state_all',
                            lambda: [s.clone() for s in self.states])

        def set_rng_state(state, device='cuda'):
            self.states[self._index(device)] = state.clone()

        def set_rng_state_all(states):
            for i, state in enumerate(states):
                set_rng_state(state, i)

        monkeypatch.setattr(torch.cuda, 'set_rng_state', set_rng_state)
        monkeypatch.setattr(torch.cuda, 'set_rng_state_all', set_rng_state_all)


def _saved_on(monkeypatch, count: int, current: int) -> dict:
    saver = FakeCudaGenerators(count, current)
    saver.install(monkeypatch)
    saver.states[current] = torch.tensor([99], dtype=torch.uint8)
    return capture_rng_state()


@pytest.mark.parametrize('saved, restored', [((4, 2), (1, 0)), ((1, 0), (4, 2)), ((2, 1), (2, 1))],
                         ids=['saw-4-now-1', 'saw-1-now-4', 'same'])
def test_cuda_state_is_the_current_devices_only(monkeypatch, saved, restored):
    """A rank that sees fewer GPUs than the one that saved (CUDA_VISIBLE_DEVICES per rank on
    resume) does not fail, and one that sees more restores into its own device, not cuda:0."""
    state = _saved_on(monkeypatch, *saved)
    restorer = FakeCudaGenerators(*restored)
    restorer.install(monkeypatch)
    before = [s.clone() for s in restorer.states]
    restore_rng_state(state)
    for i, (now, was) in enumerate(zip(restorer.states, before)):
        assert torch.equal(now, torch.tensor([99], dtype=torch.uint8) if i == restored[1] else was)


def test_old_checkpoints_with_every_devices_state_restore_the_current_ones(monkeypatch):
    state = capture_rng_state()
    state['cuda'] = [torch.tensor([50 + i], dtype=torch.uint8) for i in range(3)]
    restorer = FakeCudaGenerators(4, 1)
    restorer.install(monkeypatch)
    restore_rng_state(state)
    assert [int(s) for s in restorer.states] == [10, 51, 12, 13]
    restorer.current = 3  # saved by a process that saw 3 GPUs: nothing for cuda:3
    restore_rng_state(state)
    assert [int(s) for s in restorer.states] == [10, 51, 12, 13]
