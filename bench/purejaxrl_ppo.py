"""PureJaxRL's PPO on CartPole, written here in plain JAX: the workload of
`bench_jax.py --workload ppo`, so that what rltrack's `jax.debug.callback`
target costs is measured beside a real training update, not only beside the
tiny loop.

It follows PureJaxRL's `ppo.py` with its CartPole-v1 config (num_envs 4,
num_steps 128, update_epochs 4, num_minibatches 4, an actor and a critic of
64x64 tanh layers, Adam at 2.5e-4 annealed, gradients clipped at 0.5 of
global norm, GAE with gamma 0.99 and lambda 0.95, clip 0.2, entropy 0.01,
value 0.5) and gymnax's CartPole-v1 dynamics (auto-reset, 500 steps at most).
Adam is written out (optax is not needed). It logs once per update, 12
metrics, as a user logs PPO's losses and returns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NUM_ENVS, NUM_STEPS, UPDATE_EPOCHS, NUM_MINIBATCHES = 4, 128, 4, 4
GAMMA, LAMBDA, CLIP, ENT_COEF, VF_COEF, MAX_GRAD_NORM, LR, HIDDEN = 0.99, 0.95, 0.2, 0.01, 0.5, 0.5, 2.5e-4, 64
#: gymnax CartPole-v1
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE, TAU, MAX_STEPS = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02, 500
THETA_LIMIT, X_LIMIT = 12 * 2 * jnp.pi / 360, 2.4


def cartpole_reset(key):
    return {"obs": jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05), "t": 0, "ret": 0.0}


def cartpole_step(key, state, action):
    """One step (gymnax's Euler integration); a finished episode starts again. Returns the state, reward,
    done, and the return of the episode that just ended (0 if none did)."""
    x, x_dot, theta, theta_dot = state["obs"]
    force = FORCE * (2 * action - 1)
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    total, polemass_length = MASSCART + MASSPOLE, MASSPOLE * LENGTH
    temp = (force + polemass_length * theta_dot**2 * sin) / total
    theta_acc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * cos**2 / total))
    x_acc = temp - polemass_length * theta_acc * cos / total
    obs = jnp.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc])
    t, ret = state["t"] + 1, state["ret"] + 1.0
    done = (jnp.abs(obs[0]) > X_LIMIT) | (jnp.abs(obs[2]) > THETA_LIMIT) | (t >= MAX_STEPS)
    fresh = cartpole_reset(key)
    state = jax.tree.map(lambda new, old: jnp.where(done, new, old), fresh, {"obs": obs, "t": t, "ret": ret})
    return state, 1.0, done, jnp.where(done, ret, 0.0)


def init_params(key):
    def dense(key, n_in, n_out, scale):
        return {"w": jax.nn.initializers.orthogonal(scale)(key, (n_in, n_out)), "b": jnp.zeros(n_out)}

    k = jax.random.split(key, 6)
    root2 = jnp.sqrt(2.0)
    return {"actor": [dense(k[0], 4, HIDDEN, root2), dense(k[1], HIDDEN, HIDDEN, root2), dense(k[2], HIDDEN, 2, 0.01)],
            "critic": [dense(k[3], 4, HIDDEN, root2), dense(k[4], HIDDEN, HIDDEN, root2), dense(k[5], HIDDEN, 1, 1.0)]}  # fmt: skip


def mlp(layers, x):
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def policy(params, obs):
    return jax.nn.log_softmax(mlp(params["actor"], obs)), mlp(params["critic"], obs)[..., 0]


def ppo_loss(params, batch):
    logp_all, value = policy(params, batch["obs"])
    logp = jnp.take_along_axis(logp_all, batch["action"][:, None], axis=1)[:, 0]
    value_clipped = batch["value"] + jnp.clip(value - batch["value"], -CLIP, CLIP)
    value_loss = 0.5 * jnp.maximum((value - batch["target"]) ** 2, (value_clipped - batch["target"]) ** 2).mean()
    ratio = jnp.exp(logp - batch["logp"])
    gae = (batch["advantage"] - batch["advantage"].mean()) / (batch["advantage"].std() + 1e-8)
    actor_loss = -jnp.minimum(ratio * gae, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * gae).mean()
    entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
    total = actor_loss + VF_COEF * value_loss - ENT_COEF * entropy
    return total, {"value_loss": value_loss, "actor_loss": actor_loss, "entropy": entropy,
                   "approx_kl": ((ratio - 1) - jnp.log(ratio)).mean(), "clip_frac": (jnp.abs(ratio - 1) > CLIP).mean()}  # fmt: skip


def adam(params, grads, opt, lr):
    """Adam (optax's defaults) after clipping the gradients to `MAX_GRAD_NORM` of global norm."""
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
    grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, MAX_GRAD_NORM / (norm + 1e-6)), grads)
    count = opt["count"] + 1
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["mu"], grads)
    nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["nu"], grads)
    step = jax.tree.map(lambda m, v: lr * (m / (1 - 0.9**count)) / (jnp.sqrt(v / (1 - 0.999**count)) + 1e-8), mu, nu)
    return jax.tree.map(lambda p, s: p - s, params, step), {"count": count, "mu": mu, "nu": nu}, norm


def make_ppo(updates: int, emit):
    """`train(key, seed)` of PureJaxRL's shape: `updates` PPO updates in one `lax.scan`, `emit(metrics, step, seed)`
    (None: no logging) called inside it once per update with 12 metrics at `step` = transitions so far."""

    def train(key, seed):
        key, k_params, k_env = jax.random.split(key, 3)
        params = init_params(k_params)
        opt = {"count": 0, "mu": jax.tree.map(jnp.zeros_like, params), "nu": jax.tree.map(jnp.zeros_like, params)}
        envs = jax.vmap(cartpole_reset)(jax.random.split(k_env, NUM_ENVS))

        def env_step(carry, _):
            params, envs, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            logp_all, value = policy(params, envs["obs"])
            action = jax.random.categorical(k_act, logp_all)
            logp = jnp.take_along_axis(logp_all, action[:, None], axis=1)[:, 0]
            next_envs, reward, done, finished = jax.vmap(cartpole_step)(jax.random.split(k_env, NUM_ENVS), envs, action)
            step = {"obs": envs["obs"], "action": action, "logp": logp, "value": value, "reward": reward, "done": done, "finished": finished}
            return (params, next_envs, key), step

        def update(carry, index):
            params, opt, envs, key = carry
            (params, envs, key), traj = jax.lax.scan(env_step, (params, envs, key), None, NUM_STEPS)
            _, last_value = policy(params, envs["obs"])

            def gae_step(carry, step):
                gae, next_value = carry
                delta = step["reward"] + GAMMA * next_value * (1 - step["done"]) - step["value"]
                gae = delta + GAMMA * LAMBDA * (1 - step["done"]) * gae
                return (gae, step["value"]), gae

            _, advantage = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value), traj, reverse=True)
            batch = {"obs": traj["obs"], "action": traj["action"], "logp": traj["logp"], "value": traj["value"],
                     "advantage": advantage, "target": advantage + traj["value"]}  # fmt: skip
            batch = jax.tree.map(lambda x: x.reshape((NUM_STEPS * NUM_ENVS, *x.shape[2:])), batch)
            lr = LR * (1.0 - index / updates)

            def epoch(carry, _):
                params, opt, key = carry
                key, k_perm = jax.random.split(key)
                order = jax.random.permutation(k_perm, NUM_STEPS * NUM_ENVS).reshape((NUM_MINIBATCHES, -1))

                def minibatch(carry, rows):
                    params, opt = carry
                    (loss, aux), grads = jax.value_and_grad(ppo_loss, has_aux=True)(params, jax.tree.map(lambda x: x[rows], batch))
                    params, opt, norm = adam(params, grads, opt, lr)
                    return (params, opt), {"loss": loss, "grad_norm": norm, **aux}

                (params, opt), losses = jax.lax.scan(minibatch, (params, opt), order)
                return (params, opt, key), losses

            (params, opt, key), losses = jax.lax.scan(epoch, (params, opt, key), None, UPDATE_EPOCHS)
            if emit is not None:
                episodes = traj["done"].sum()
                metrics = {"episode_return": traj["finished"].sum() / jnp.maximum(episodes, 1), "episodes": episodes,
                           "loss": {name: value.mean() for name, value in losses.items()},
                           "value_mean": traj["value"].mean(), "advantage_std": advantage.std(), "learning_rate": lr}  # fmt: skip
                emit(metrics, (index + 1) * NUM_ENVS * NUM_STEPS, seed)
            return (params, opt, envs, key), None

        (params, *_), _ = jax.lax.scan(update, (params, opt, envs, key), jnp.arange(updates))
        return params

    return train
