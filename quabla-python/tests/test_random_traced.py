"""Random numbers inside transforms: a Key passed to a transform, and key tensors
(`qb.random.key_data`), give the host generator's samples bit for bit eagerly, under `jit`,
per example under `vmap` and inside `fori_loop`; typed errors for bad keys."""

import numpy as np
import pytest

import quabla as qb

R = qb.random

DRAWS = {
    "uniform": lambda k: R.uniform(k, (5,)),
    "uniform f32": lambda k: R.uniform(k, (2, 3), dtype=qb.float32, minval=-1.0, maxval=1.0),
    "normal": lambda k: R.normal(k, (7,)),
    "normal f32": lambda k: R.normal(k, (4,), dtype=qb.float32),
    "bernoulli": lambda k: R.bernoulli(k, 0.3, (9,)),
    "glorot_normal": lambda k: R.glorot_normal(k, (3, 4)),
    "glorot_uniform": lambda k: R.glorot_uniform(k, (3, 4)),
    "he_normal": lambda k: R.he_normal(k, (4, 3)),
    "randint": lambda k: R.randint(k, (8,), -5, 7),
    "randint int32": lambda k: R.randint(k, (8,), 0, 2**31, dtype=qb.int32),
    "truncated_normal": lambda k: R.truncated_normal(k, -1.0, 2.0, (6,)),
    "truncated_normal tail": lambda k: R.truncated_normal(k, 3.0, float("inf"), (5,), dtype=qb.float32),
    "permutation": lambda k: R.permutation(k, 6),
    "categorical": lambda k: R.categorical(k, qb.array([[0.0, 1.0, -1.0], [2.0, 0.0, 0.5]])),
}

KEYS = [R.key(0), R.key(42), R.key(-1)]


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_the_same_bits_eagerly_jitted_and_batched(name):
    draw = DRAWS[name]
    jitted = qb.jit(draw)
    for k in KEYS:
        host = draw(k)
        same(draw(R.key_data(k)), host)
        # A Key passed to a transform is traced as its key tensor.
        same(jitted(k), host)
        same(jitted(R.key_data(k)), host)
    keys = R.split(R.key(3), 4)
    batched = qb.vmap(draw)(R.key_data(keys))
    same(batched, qb.stack([draw(k) for k in keys]))
    same(qb.jit(qb.vmap(draw))(R.key_data(keys)), batched)


def test_split_and_fold_in_inside_jit_and_fori_loop():
    k = R.key(0)
    children = R.split(R.key_data(k), 3)
    assert [int(v) % 2**64 for v in children.tolist()] == [
        12141488642634205887, 11746937539006808163, 1638637292813414338]
    assert R.wrap_key_data(R.fold_in(R.key_data(R.key(7)), -1)).value == 18102033877536474386

    def derive(key):
        a, b = R.split(key)
        return R.normal(R.fold_in(b, 9), (3,)), a

    z, a = qb.jit(derive)(k)
    a_host, b_host = R.split(k)
    same(z, R.normal(R.fold_in(b_host, 9), (3,)))
    assert R.wrap_key_data(a) == a_host

    def body(i, acc, key):
        return acc + R.uniform(R.fold_in(key, i.astype(qb.int64)), (3,))

    want = qb.zeros((3,))
    for i in range(5):
        want = want + R.uniform(R.fold_in(k, i), (3,))
    looped = qb.jit(lambda key: qb.fori_loop(0, 5, body, qb.zeros((3,)), operands=(key,)))(k)
    same(looped, want)


def test_samplers_pass_a_chi_square_test():
    # randint over 8 values and categorical over 3 on 10^6 draws (0.1% critical values).
    k1, k2 = R.split(R.key(11))
    r = np.asarray(R.randint(k1, (10**6,), 0, 8))
    counts = np.bincount(r, minlength=8)
    chi2 = ((counts - 125000.0) ** 2 / 125000.0).sum()
    assert chi2 < 24.32, counts
    logits = np.array([0.5, -1.0, 1.5])
    p = np.exp(logits) / np.exp(logits).sum()
    c = np.asarray(R.categorical(R.key_data(k2), qb.array(np.tile(logits, (333334, 1)))))
    counts = np.bincount(c, minlength=3)
    expected = p * c.size
    assert ((counts - expected) ** 2 / expected).sum() < 13.82, counts


def test_truncated_normal_is_the_normal_quantile_of_a_uniform():
    # Against the standard library's normal distribution: the KS distance on 10^5 draws and
    # the samples' CDF values, uniform on [cdf(lower), cdf(upper)].
    import statistics
    nd = statistics.NormalDist()
    for lower, upper in [(-2.0, 0.5), (-float("inf"), -3.0), (5.0, 7.0)]:
        t = np.sort(np.asarray(R.truncated_normal(R.key(4), lower, upper, (100000,))))
        assert t.min() >= lower and t.max() <= upper
        lo, hi = nd.cdf(lower), nd.cdf(upper)
        # Mirrored tails: compare through the symmetric CDF.
        if lower + upper > 0:
            f = [(nd.cdf(-lower) - nd.cdf(-x)) / (nd.cdf(-lower) - nd.cdf(-upper)) for x in t]
        else:
            f = [(nd.cdf(x) - lo) / (hi - lo) for x in t]
        n = len(t)
        d = max(max(abs(fi - i / n), abs((i + 1) / n - fi)) for i, fi in enumerate(f))
        assert d < 1.95 / n ** 0.5, (lower, upper, d)


def test_bad_keys_are_typed_errors():
    with pytest.raises(TypeError, match="key must be a quabla.random.Key or an int64 key tensor"):
        R.normal(3, (2,))
    with pytest.raises(TypeError, match="int64 key tensor, got a float64 tensor"):
        R.normal(qb.array(1.0), (2,))
    with pytest.raises(ValueError, match="single key"):
        R.normal(R.split(R.key_data(R.key(0)), 2), (2,))
    with pytest.raises(TypeError, match="astype"):
        R.fold_in(R.key_data(R.key(0)), qb.array(1.5))
    with pytest.raises(ValueError, match="num must be >= 1"):
        R.split(R.key_data(R.key(0)), 0)
    with pytest.raises(TypeError, match="randint dtype must be int32 or int64"):
        R.randint(R.key(0), (2,), 0, 3, dtype=qb.float64)
    with pytest.raises(TypeError, match="randint minval must be an int or an integer array, got float"):
        R.randint(R.key(0), (2,), 0.5, 3)
    with pytest.raises(ValueError, match="randint requires minval < maxval"):
        R.randint(R.key_data(R.key(0)), (2,), 3, 3)
    with pytest.raises(ValueError, match="truncated_normal requires lower < upper"):
        R.truncated_normal(R.key(0), 1.0, 1.0, (2,))
    # An array is permuted (it used to be refused with the indexing spelling).
    x = qb.array([1.0, 2.0, 3.0])
    same(R.permutation(R.key(0), x), x[R.permutation(R.key(0), 3)])
    with pytest.raises(TypeError, match="key_data takes"):
        R.key_data(3)
    with pytest.raises(qb.TracerError):
        qb.jit(R.wrap_key_data)(R.key(0))
    # A traced probability is a parameter like any other (it used to be refused).
    same(qb.jit(lambda p: R.bernoulli(R.key(0), p, (2,)))(qb.array(0.5)), R.bernoulli(R.key(0), 0.5, (2,)))
