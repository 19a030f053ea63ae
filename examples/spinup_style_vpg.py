"""SpinningUp's VPG on CartPole-v1, logging through rltrack's drop-in EpochLogger.

The training loop follows `spinup/algos/pytorch/vpg/vpg.py` (actor-critic MLP,
GAE-lambda buffer, one policy step and several value steps per epoch) and logs
exactly as it does: `store(...)` during the epoch, `log_tabular(...)` and
`dump_tabular()` at its end, `save_config(locals())`, `setup_pytorch_saver`,
`save_state`. The only change from SpinningUp is the import line:

    from rltrack.adapters.spinup import EpochLogger   # was: from spinup.utils.logx import EpochLogger

SpinningUp's files land in --output-dir (progress.txt, config.json, pyt_save/),
and every row also goes to an rltrack run under --root: TotalEnvInteracts and
Epoch as the env_steps and epoch axes, the table's columns under collector/,
evaluator/ and learner/, and per epoch DI-engine's collector, evaluator and
learner blocks computed from the stored EpRet/EpLen, TestEpRet/TestEpLen and
losses (log/<namespace>/<namespace>_logger.txt).

    python examples/spinup_style_vpg.py --epochs 10
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from rltrack.adapters.spinup import EpochLogger


def discount_cumsum(x: np.ndarray, discount: float) -> np.ndarray:
    out = np.zeros_like(x)
    running = 0.0
    for i in reversed(range(len(x))):
        running = x[i] + discount * running
        out[i] = running
    return out


class VPGBuffer:
    """Trajectories of one epoch, with GAE-lambda advantages and rewards-to-go."""

    def __init__(self, obs_dim: int, size: int, gamma: float = 0.99, lam: float = 0.97) -> None:
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.act = np.zeros(size, dtype=np.int64)
        self.rew = np.zeros(size, dtype=np.float32)
        self.val = np.zeros(size, dtype=np.float32)
        self.logp = np.zeros(size, dtype=np.float32)
        self.adv = np.zeros(size, dtype=np.float32)
        self.ret = np.zeros(size, dtype=np.float32)
        self.gamma, self.lam = gamma, lam
        self.ptr, self.path_start = 0, 0

    def store(self, obs, act, rew, val, logp) -> None:
        self.obs[self.ptr], self.act[self.ptr], self.rew[self.ptr] = obs, act, rew
        self.val[self.ptr], self.logp[self.ptr] = val, logp
        self.ptr += 1

    def finish_path(self, last_val: float = 0.0) -> None:
        path = slice(self.path_start, self.ptr)
        rews = np.append(self.rew[path], last_val)
        vals = np.append(self.val[path], last_val)
        deltas = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv[path] = discount_cumsum(deltas, self.gamma * self.lam)
        self.ret[path] = discount_cumsum(rews, self.gamma)[:-1]
        self.path_start = self.ptr

    def get(self) -> dict[str, torch.Tensor]:
        self.ptr, self.path_start = 0, 0
        adv = (self.adv - self.adv.mean()) / (self.adv.std() + 1e-8)
        data = dict(obs=self.obs, act=self.act, ret=self.ret, adv=adv, logp=self.logp)
        return {k: torch.as_tensor(v) for k, v in data.items()}


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.Tanh() if i < len(sizes) - 2 else nn.Identity()]
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        self.pi = mlp([obs_dim, *hidden, n_actions])
        self.v = mlp([obs_dim, *hidden, 1])

    def snapshot(self) -> None:
        """Copies the weights to numpy for acting: one env step then costs microseconds, not a
        torch call per layer (SpinningUp calls torch here; only the speed differs)."""
        self._np = [[(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in net if isinstance(m, nn.Linear)]
                    for net in (self.pi, self.v)]  # fmt: skip

    @staticmethod
    def _forward(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = np.tanh(x)
        return x

    def step(self, obs: np.ndarray) -> tuple[int, float, float]:
        """Samples an action; returns it, the state value and the action's log-probability."""
        logits = self._forward(self._np[0], obs)
        logp_all = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        a = int(np.random.choice(len(logp_all), p=np.exp(logp_all)))
        return a, float(self._forward(self._np[1], obs)[0]), float(logp_all[a])


def vpg(env_id="CartPole-v1", seed=0, steps_per_epoch=1000, epochs=10, gamma=0.99, pi_lr=3e-3, vf_lr=1e-3,
        train_v_iters=40, lam=0.97, max_ep_len=500, num_test_episodes=3, logger_kwargs=None, save_freq=5):  # fmt: skip
    logger = EpochLogger(**(logger_kwargs or {}))
    logger.save_config(locals())
    torch.manual_seed(seed)
    np.random.seed(seed)
    env, test_env = gym.make(env_id), gym.make(env_id)
    obs_dim, n_actions = env.observation_space.shape[0], env.action_space.n
    ac = ActorCritic(obs_dim, n_actions)
    buf = VPGBuffer(obs_dim, steps_per_epoch, gamma, lam)
    pi_opt = torch.optim.Adam(ac.pi.parameters(), lr=pi_lr)
    vf_opt = torch.optim.Adam(ac.v.parameters(), lr=vf_lr)
    logger.setup_pytorch_saver(ac)
    ac.snapshot()

    def losses(data):
        dist = Categorical(logits=ac.pi(data["obs"]))
        logp = dist.log_prob(data["act"])
        loss_pi = -(logp * data["adv"]).mean()
        loss_v = ((ac.v(data["obs"]).squeeze(-1) - data["ret"]) ** 2).mean()
        return loss_pi, loss_v, (data["logp"] - logp).mean().item(), dist.entropy().mean().item()

    def update():
        data = buf.get()
        pi_old, v_old, _, _ = losses(data)
        pi_opt.zero_grad()
        loss_pi, _, kl, ent = losses(data)
        loss_pi.backward()
        pi_opt.step()
        for _ in range(train_v_iters):
            vf_opt.zero_grad()
            _, loss_v, _, _ = losses(data)
            loss_v.backward()
            vf_opt.step()
        ac.snapshot()
        pi_new, v_new, _, _ = losses(data)
        logger.store(LossPi=pi_old.item(), LossV=v_old.item(), KL=kl, Entropy=ent,
                     DeltaLossPi=pi_new.item() - pi_old.item(), DeltaLossV=v_new.item() - v_old.item())  # fmt: skip

    def test_agent():
        for j in range(num_test_episodes):
            o, _ = test_env.reset(seed=10_000 + j)
            done, ep_ret, ep_len = False, 0.0, 0
            while not done and ep_len < max_ep_len:
                a = int(ac._forward(ac._np[0], o).argmax())
                o, r, terminated, truncated, _ = test_env.step(a)
                done = terminated or truncated
                ep_ret, ep_len = ep_ret + r, ep_len + 1
            logger.store(TestEpRet=ep_ret, TestEpLen=ep_len)

    start_time = time.time()
    o, _ = env.reset(seed=seed)
    ep_ret, ep_len = 0.0, 0
    for epoch in range(epochs):
        for t in range(steps_per_epoch):
            a, v, logp = ac.step(o)
            next_o, r, terminated, truncated, _ = env.step(a)
            ep_ret, ep_len = ep_ret + r, ep_len + 1
            buf.store(o, a, r, v, logp)
            logger.store(VVals=v)
            o = next_o
            timeout = truncated or ep_len == max_ep_len
            epoch_ended = t == steps_per_epoch - 1
            if terminated or timeout or epoch_ended:
                if terminated:
                    last_v = 0.0
                else:
                    _, last_v, _ = ac.step(o)
                buf.finish_path(last_v)
                if terminated or timeout:  # only a finished episode has a return worth logging
                    logger.store(EpRet=ep_ret, EpLen=ep_len)
                o, _ = env.reset()
                ep_ret, ep_len = 0.0, 0
        if (epoch % save_freq == 0) or (epoch == epochs - 1):
            logger.save_state({"env": env_id}, None)
        update()
        if epoch % 2 == 1 or epoch == epochs - 1:  # test episodes every other epoch: TestEpRet appears late
            test_agent()
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        if "TestEpRet" in logger.epoch_dict and logger.epoch_dict["TestEpRet"]:
            logger.log_tabular("TestEpRet", with_min_and_max=True)
            logger.log_tabular("TestEpLen", average_only=True)
        logger.log_tabular("VVals", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * steps_per_epoch)
        for key in ("LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL"):
            logger.log_tabular(key, average_only=True)
        logger.log_tabular("Time", time.time() - start_time)
        logger.dump_tabular()
    logger.close()
    return logger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exp-name", default="vpg")
    parser.add_argument("--output-dir", default=None, help="SpinningUp's output dir (default data/<exp>/<exp>_s<seed>)")
    parser.add_argument("--root", default="runs", help="where the rltrack run directory goes")
    args = parser.parse_args()
    output_dir = args.output_dir or f"data/{args.exp_name}/{args.exp_name}_s{args.seed}"
    logger_kwargs = dict(output_dir=output_dir, exp_name=args.exp_name, rltrack_config={"run": {"root": args.root}})
    torch.set_num_threads(1)
    logger = vpg(seed=args.seed, epochs=args.epochs, steps_per_epoch=args.steps, logger_kwargs=logger_kwargs)
    print(f"\nSpinningUp files: {output_dir}\nrltrack run:      {logger.rltrack.run_dir}")


if __name__ == "__main__":
    main()
