"""trainer.compile and trainer.compile_mode reach torch.compile; the compiled module computes what the eager one does."""
import torch
from torch import nn

from runner.config.sections import TrainerConfig
from runner.train.step import compiled, step_begin


def test_compile_modes_give_the_eager_result():
    torch.manual_seed(0)
    net, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), torch.randn(5, 8)
    assert compiled(net, TrainerConfig()) is net  # trainer.compile off
    for mode in ("default", "reduce-overhead"):
        tc = TrainerConfig(compile=True, compile_mode=mode)
        fast = compiled(net, tc)
        assert isinstance(fast, torch._dynamo.eval_frame.OptimizedModule) and fast._orig_mod is net
        step_begin(tc)
        torch.testing.assert_close(fast(x), net(x))
