"""Integer dtypes from Python (numerics.md §1.3 and §12 as amended): ints and all-int lists
import as int64, NumPy integer arrays keep (or widen to) a signed dtype, Python ints are weak
scalars, and every integer operator agrees with NumPy, edge cases included (overflow, negative
division, the extremes of each dtype), eagerly and under jit with the same values."""

import numpy as np
import pytest

import quabla as qb

I32 = np.iinfo(np.int32)
I64 = np.iinfo(np.int64)


def test_imports_and_constructors():
    assert qb.array(3).dtype == qb.int64
    assert qb.array([1, 2, 3]).dtype == qb.int64
    assert qb.array([1, 2.0]).dtype == qb.float64
    assert qb.array([True, 2]).dtype == qb.int64
    assert qb.array([True, False]).dtype == qb.bool_
    assert qb.arange(5).dtype == qb.int64 and qb.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert qb.arange(1.0, 2.0, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert qb.arange(10, 0, -3).tolist() == [10, 7, 4, 1]
    assert qb.full((2,), 3).dtype == qb.int64
    assert qb.array([2**62, -(2**63)]).tolist() == [2**62, -(2**63)]
    with pytest.raises(TypeError, match="int64"):
        qb.array(2**64)
    for np_dtype, want in [
        (np.int8, qb.int32),
        (np.int16, qb.int32),
        (np.int32, qb.int32),
        (np.int64, qb.int64),
        (np.uint8, qb.int32),
        (np.uint16, qb.int32),
        (np.uint32, qb.int64),
    ]:
        a = np.array([0, 1, np.iinfo(np_dtype).max], dtype=np_dtype)
        t = qb.asarray(a)
        assert t.dtype == want, np_dtype
        assert t.tolist() == a.astype(np.int64).tolist()
    with pytest.raises(TypeError, match="uint64"):
        qb.asarray(np.array([1], dtype=np.uint64))
    # Back to NumPy with the dtype kept, zero-copy.
    n = np.asarray(qb.array([1, -2], dtype=qb.int32))
    assert n.dtype == np.int32 and n.tolist() == [1, -2]
    assert qb.int32.itemsize == 4 and qb.int64.name == "int64"
    assert repr(qb.array([1, -2, 10])) == "Tensor([ 1, -2, 10], dtype=int64)"
    x = qb.array(7)
    assert int(x) == 7 and [10, 20, 30, 40, 50, 60, 70, 80][x] == 80
    assert isinstance(x.item(), int)


def _cases(dtype):
    info = np.iinfo(dtype)
    a = np.array([-7, 7, -7, 7, 5, info.min, info.max, 0, info.min, -1], dtype=dtype)
    b = np.array([2, -2, -2, 2, 0, -1, 1, 3, 1, 5], dtype=dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_operators_match_numpy(dtype):
    a, b = _cases(dtype)
    qa, qbb = qb.asarray(a), qb.asarray(b)
    with np.errstate(all="ignore"):
        checks = {
            "+": (a + b, qa + qbb),
            "-": (a - b, qa - qbb),
            "*": (a * b, qa * qbb),
            "&": (a & b, qa & qbb),
            "|": (a | b, qa | qbb),
            "^": (a ^ b, qa ^ qbb),
            "~": (~a, ~qa),
            "neg": (-a, -qa),
            "abs": (np.abs(a), abs(qa)),
            ">> 1": (a >> 1, qa >> 1),
            "<< 3": (a << 3, qa << 3),
            "+ 1": (a + 1, qa + 1),
            "max": (np.max(a), qa.max()),
            "sum": (np.sum(a, dtype=dtype), qb.sum(qa)),
        }
        # NumPy gives 0 for integer division by zero too (with a warning).
        nonzero = b != 0
        checks["//"] = (np.where(nonzero, a // np.where(nonzero, b, 1), 0), qa // qbb)
        checks["%"] = (np.where(nonzero, a % np.where(nonzero, b, 1), 0), qa % qbb)
        # The module functions of NumPy's names, for code ported from jax.numpy.
        checks["bitwise_and"] = (np.bitwise_and(a, b), qb.bitwise_and(qa, qbb))
        checks["bitwise_or"] = (np.bitwise_or(a, b), qb.bitwise_or(qa, qbb))
        checks["bitwise_xor"] = (np.bitwise_xor(a, b), qb.bitwise_xor(qa, qbb))
        checks["bitwise_not"] = (np.bitwise_not(a), qb.bitwise_not(qa))
        checks["left_shift"] = (np.left_shift(a, 3), qb.left_shift(qa, 3))
        checks["right_shift"] = (np.right_shift(a, 1), qb.right_shift(qa, 1))
        checks["floor_divide"] = (checks["//"][0], qb.floor_divide(qa, qbb))
    for name, (want, got) in checks.items():
        assert got.dtype == (qb.int32 if dtype == np.int32 else qb.int64), name
        assert np.asarray(got).tolist() == np.asarray(want).tolist(), name
    # `/` and transcendentals promote to float64; comparisons give bool.
    assert (qa / qbb).dtype == qb.float64
    assert qb.sin(qa).dtype == qb.float64
    assert (qa < qbb).tolist() == (a < b).tolist()
    # A weak float meeting integers gives float64; a weak int keeps the array's dtype.
    assert (qa * 0.5).dtype == qb.float64
    assert (qa + 1).dtype == qa.dtype
    with pytest.raises(ValueError, match="negative integer powers"):
        qa**-1
    assert (qa**2).tolist() == (a.astype(np.int64) ** 2).astype(dtype).tolist()


def test_jit_gives_the_eager_values():
    a, b = _cases(np.int64)

    def f(x, y):
        return [x // y, x % y, x + y, x * y, x ^ y, x >> 2, qb.sum(x), qb.abs(x)]

    eager = f(qb.asarray(a), qb.asarray(b))
    jitted = qb.jit(f)(qb.asarray(a), qb.asarray(b))
    for e, j in zip(eager, jitted):
        assert e.dtype == j.dtype and e.tolist() == j.tolist()


def test_grad_refuses_integer_arguments_and_ignores_integer_values():
    with pytest.raises(TypeError, match="astype"):
        qb.grad(lambda x: qb.sum(x * 1.0))(qb.array([1, 2]))
    g = qb.grad(lambda x: qb.sum(x * qb.array([3, -2])))(qb.array([0.5, 1.5]))
    assert g.tolist() == [3.0, -2.0]
