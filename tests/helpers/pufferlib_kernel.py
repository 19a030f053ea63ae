"""A STAND-IN for one compiled kernel of PufferLib 3, so that its real trainer
(`pufferlib.pufferl.PuffeRL`) trains here.

Why: the `pufferlib-core` 3.0.x wheel's only compiled extension,
`pufferlib._C`, links against CUDA torch (`libcudart.so.12`,
`libtorch_cuda.so`, `libc10_cuda.so`); with the CPU torch of these tests its
import fails, pufferl sets `_C_AVAILABLE = False`, and `PuffeRL.train()`
raises "Training requires the pufferlib._C extension". The extension's one
op, `torch.ops.pufferlib.compute_puff_advantage`, is defined here in plain
torch (the generalized advantage with V-trace clipping, as PufferLib's CPU
kernel computes it, row by row) and pufferl is told it is there. Everything
else, the vectorized environments, rollouts, the PPO update, logging and
checkpoints, is PufferLib's own code.
"""

from __future__ import annotations

import torch


def _advantage(values, rewards, terminals, ratio, advantages, gamma, gae_lambda, rho_clip, c_clip) -> None:
    """PufferLib's `puff_advantage`: per row, backwards, into `advantages` (in place)."""
    horizon = values.shape[1]
    last = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    for t in range(horizon - 2, -1, -1):
        nonterminal = 1.0 - terminals[:, t + 1]
        rho = torch.clamp(ratio[:, t], max=rho_clip)
        c = torch.clamp(ratio[:, t], max=c_clip)
        delta = rho * (rewards[:, t + 1] + gamma * values[:, t + 1] * nonterminal - values[:, t])
        last = delta + gamma * gae_lambda * c * last * nonterminal
        advantages[:, t] = last


def install() -> None:
    """Defines `torch.ops.pufferlib.compute_puff_advantage` (once) and tells pufferl it may train."""
    from pufferlib import pufferl

    if not hasattr(torch.ops.pufferlib, "compute_puff_advantage"):
        torch.library.define(
            "pufferlib::compute_puff_advantage",
            "(Tensor values, Tensor rewards, Tensor terminals, Tensor ratio, Tensor(a!) advantages, float gamma, "
            "float gae_lambda, float rho_clip, float c_clip) -> ()",
        )
        torch.library.impl("pufferlib::compute_puff_advantage", "CPU")(_advantage)
    pufferl._C_AVAILABLE = True
