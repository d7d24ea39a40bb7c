"""``qb.distributed`` (api.md §20) in one process, and the example script under
``mpirun -np 2`` when the package was built with MPI and ``mpirun`` is installed."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import quabla as qb

ROOT = pathlib.Path(__file__).resolve().parents[1]


def mlp_loss(p, batch):
    x, y = batch
    return qb.mean((qb.tanh(x @ p["w"]).reshape(-1) - y) ** 2)


def problem(rows=8):
    k = qb.random.split(qb.random.key(3), 3)
    params = {"w": qb.random.normal(k[0], (2, 1))}
    return params, (qb.random.normal(k[1], (rows, 2)), qb.random.normal(k[2], (rows,)))


def test_a_process_without_a_launcher_is_rank_zero_of_one():
    qb.distributed.init()
    assert (qb.distributed.rank(), qb.distributed.size()) == (0, 1)
    qb.distributed.barrier()
    x = qb.array([1.5, -2.0])
    for op in ["sum", "mean", "max", "min"]:
        assert qb.distributed.all_reduce(x, op=op).tolist() == [1.5, -2.0]
    assert qb.distributed.broadcast(x, root=0).tolist() == [1.5, -2.0]
    assert qb.distributed.all_gather(x).shape == [1, 2]
    with pytest.raises(ValueError, match="op must be"):
        qb.distributed.all_reduce(x, op="prod")
    with pytest.raises(ValueError, match="is not a rank"):
        qb.distributed.broadcast(x, root=1)
    with pytest.raises(ValueError, match="bool"):
        qb.distributed.all_reduce(qb.array([True]), op="sum")


def test_one_process_value_and_grad_is_value_and_grad():
    params, batch = problem()
    value, grads = qb.distributed.value_and_grad(mlp_loss, shard_argnums=(1,))(params, batch)
    v, g = qb.value_and_grad(mlp_loss)(params, batch)
    assert float(value) == float(v)
    assert grads["w"].tolist() == g["w"].tolist()


def test_tf12_misuse_is_value_error():
    params, batch = problem()
    with pytest.raises(ValueError, match="cannot differentiate with respect to sharded argument 1"):
        qb.distributed.value_and_grad(mlp_loss, shard_argnums=(1,), argnums=(0, 1))(params, batch)
    with pytest.raises(ValueError, match="has_aux is not supported"):
        qb.distributed.value_and_grad(mlp_loss, shard_argnums=(1,), has_aux=True)(params, batch)
    step = qb.distributed.value_and_grad(mlp_loss, shard_argnums=(1,))

    @qb.jit
    def inside(w):
        return step({"w": w}, batch)[0]

    with pytest.raises(ValueError, match="cannot be called inside another transform"):
        inside(params["w"])
    # No CUDA backend in this build: the first missing piece is named, nothing falls back.
    with pytest.raises(qb.UnsupportedOperationError, match="cuda target is unavailable in this build") as e:
        qb.distributed.value_and_grad(mlp_loss, devices=["cuda:0"], shard_argnums=(1,))(params, batch)
    assert (e.value.op, e.value.device) == ("target", "cuda:0")
    with pytest.raises(ValueError, match="reduction must be"):
        qb.distributed.value_and_grad(mlp_loss, reduction="max")


def test_one_process_distributed_trainer_equals_the_trainer(tmp_path):
    params, batch = problem()
    a = qb.optim.Trainer(mlp_loss, params, qb.optim.Adam(0.05), batch, distributed=True)
    b = qb.optim.Trainer(mlp_loss, params, qb.optim.Adam(0.05), batch)
    for _ in range(10):
        a.step()
        b.step()
    assert a.params["w"].tolist() == b.params["w"].tolist()
    path = tmp_path / "ckpt.qb"
    qb.distributed.save(str(path), {"params": a.params, "steps": a.steps})
    back = qb.distributed.load(path)
    assert back["steps"] == 10 and back["params"]["w"].tolist() == a.params["w"].tolist()
    with pytest.raises(ValueError, match="shard_argnums needs distributed=True"):
        qb.optim.Trainer(mlp_loss, params, qb.optim.Adam(0.05), batch, shard_argnums=(0,))


def mpirun():
    return shutil.which("mpirun")


@pytest.mark.skipif(not qb.distributed.mpi_available, reason="built without the mpi feature")
@pytest.mark.skipif(mpirun() is None, reason="mpirun is not installed")
def test_the_example_script_under_mpirun_np_2(tmp_path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    script = ROOT / "examples" / "data_parallel.py"
    checkpoint = tmp_path / "two_ranks.qb"
    done = subprocess.run(
        [mpirun(), "--oversubscribe", "-np", "2", sys.executable, str(script), str(checkpoint)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "rank 0: ok" in out and "rank 1: ok" in out, out
    # The checkpoint of the two ranks loads in this single process, plainly and through the
    # (one-process) group.
    plain = qb.load(str(checkpoint))
    grouped = qb.distributed.load(str(checkpoint))
    assert plain["steps"] == grouped["steps"] == 50
    assert sorted(plain["params"]) == ["b1", "w1", "w2"]
    for name in plain["params"]:
        assert plain["params"][name].tolist() == grouped["params"][name].tolist()
