"""Data-parallel training with quabla across processes.

Run it on one machine with two processes:

    mpirun -np 2 python quabla-python/examples/data_parallel.py [CHECKPOINT]

(or alone: ``python data_parallel.py`` is rank 0 of 1). Every rank builds the same model and
the same full batch; ``qb.distributed.value_and_grad`` and ``Trainer(..., distributed=True)``
give each rank its shard of the rows and all-reduce the gradients in rank order, so every rank
holds the same parameters after every step. The script checks itself against the
single-process computation and prints ``rank R: ok`` at the end.
"""

import os
import sys
import tempfile

import quabla as qb

qb.distributed.init()
rank, size = qb.distributed.rank(), qb.distributed.size()

# A 2-16-1 tanh network and 64 rows of data, the same on every rank (one key).
k = qb.random.split(qb.random.key(0), 5)
params = {
    "w1": qb.random.normal(k[0], (2, 16)),
    "b1": qb.zeros(16),
    "w2": qb.random.normal(k[1], (16, 1)) * 0.25,
}
x = qb.random.normal(k[2], (64, 2))
y = qb.sin(x[:, 0]) * qb.cos(x[:, 1])


def predict(p, x):
    return (qb.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]).reshape(-1)


def loss(p, batch):
    xb, yb = batch
    return qb.mean((predict(p, xb) - yb) ** 2)


# 1. The data-parallel gradient equals the full-batch gradient (float64, 1e-12 relative).
step = qb.distributed.value_and_grad(loss, shard_argnums=(1,))
value, grads = step(params, (x, y))
full_value, full_grads = qb.value_and_grad(loss)(params, (x, y))
assert abs(float(value) - float(full_value)) <= 1e-12 * abs(float(full_value))
for name in params:
    err = float(qb.max(qb.abs(grads[name] - full_grads[name])))
    scale = float(qb.max(qb.abs(full_grads[name])))
    assert err <= 1e-12 * scale, (name, err, scale)

# 2. Uneven shards are a ValueError on every rank.
if size > 1:
    try:
        step(params, (x[: size + 1], y[: size + 1]))
        raise AssertionError("uneven shards were accepted")
    except ValueError as e:
        assert "is not divisible by" in str(e), e

# 3. A rank whose loss raises: its own exception there, RuntimeError naming it elsewhere.
if size > 1:
    def flaky(p, batch):
        if qb.distributed.rank() == size - 1:
            raise KeyError("bad shard")
        return loss(p, batch)

    try:
        qb.distributed.value_and_grad(flaky, shard_argnums=(1,))(params, (x, y))
        raise AssertionError("a raising rank went unnoticed")
    except KeyError:
        assert rank == size - 1
    except RuntimeError as e:
        assert rank != size - 1 and f"rank {size - 1} failed" in str(e), e

# 4. The data-parallel trainer: 50 Adam steps, equal to one process training alone.
parallel = qb.optim.Trainer(loss, params, qb.optim.Adam(1e-2), (x, y), distributed=True)
alone = qb.optim.Trainer(loss, params, qb.optim.Adam(1e-2), (x, y))
for _ in range(50):
    parallel.step()
    alone.step()
for name in params:
    err = float(qb.max(qb.abs(parallel.params[name] - alone.params[name])))
    assert err <= 1e-10, (name, err)

# 5. A checkpoint written once by rank 0, readable by every rank (and by any number of
# processes later: the path given as the first argument is kept for that).
keep = len(sys.argv) > 1
if keep:
    path = sys.argv[1]
else:
    stamp = qb.distributed.broadcast(qb.array([float(os.getpid())]), 0)
    path = os.path.join(tempfile.gettempdir(), f"quabla-dp-{int(float(stamp[0]))}.qb")
qb.distributed.save(path, {"params": parallel.params, "steps": parallel.steps})
back = qb.distributed.load(path)
assert back["steps"] == 50
for name in params:
    assert back["params"][name].tolist() == parallel.params[name].tolist(), name
qb.distributed.barrier()
if rank == 0 and not keep:
    os.remove(path)

print(f"rank {rank}: ok (loss {float(parallel.last_loss):.3e} on {size} process(es))")
sys.stdout.flush()
