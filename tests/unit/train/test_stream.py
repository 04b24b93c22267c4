"""trainer.stream_priority: training runs on a high-priority CUDA stream, ordered with the work around it."""
import pytest
import torch

from runner.config.sections import TrainerConfig
from runner.train.step import training_stream

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_high_priority_stream_is_used_and_ordered():
    device = torch.device("cuda")
    outer = torch.cuda.current_stream(device)
    x = torch.randn(2048, 2048, device=device)
    x.mul_(2)  # queued on the outer stream: the inner one must see it done
    with training_stream(TrainerConfig(stream_priority="high"), device):
        inner = torch.cuda.current_stream(device)
        assert inner != outer and inner.priority < outer.priority
        y = x @ x
    assert torch.cuda.current_stream(device) == outer
    torch.testing.assert_close(y.sum(), (x @ x).sum())  # read on the outer stream, after the inner one's work


@needs_cuda
def test_default_priority_keeps_the_current_stream():
    device = torch.device("cuda")
    outer = torch.cuda.current_stream(device)
    with training_stream(TrainerConfig(), device):
        assert torch.cuda.current_stream(device) == outer
