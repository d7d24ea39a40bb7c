"""Every option of the custom rules (transforms.md §14) in every combination: `custom_jvp` and
`custom_vjp` with no, one or two `nondiff_argnums` (first, middle and last positions, plain and
tuple-valued), one or two differentiable arguments; the rules receive `primals`/`tangents` as
tuples with one entry per differentiable argument and the non-differentiable arguments spread
first; first and second derivatives, `vmap` and `jit` use the rule. `checkpoint` with and
without `static_argnums` keeps values and derivatives."""

import itertools

import numpy as np
import pytest

import quabla as qb

X = [np.array([0.3, -1.2]), np.array([0.7, 2.1])]


def scale_of(v):
    return v[0] * v[1] if isinstance(v, tuple) else v


def layouts():
    """(number of differentiable arguments, nondiff positions, nondiff values)."""
    for n_diff in (1, 2):
        total_max = n_diff + 2
        for k in (0, 1, 2):
            for pos in itertools.combinations(range(n_diff + k), k):
                if max(pos, default=0) >= total_max:
                    continue
                for values in itertools.product((1.5, (0.5, 3.0)), repeat=k):
                    yield n_diff, pos, values


def split(args, pos):
    nd = [a for i, a in enumerate(args) if i in pos]
    d = [a for i, a in enumerate(args) if i not in pos]
    return nd, d


def value(nd, d):
    s = 1.0
    for v in nd:
        s = s * scale_of(v)
    return s, sum((k + 1) * qb.sin(x) for k, x in enumerate(d)) * s


def make_args(n_diff, pos, values):
    args, vals, xs = [], iter(values), iter(X[:n_diff])
    for i in range(n_diff + len(pos)):
        args.append(next(vals) if i in pos else qb.asarray(next(xs)))
    return args


@pytest.mark.parametrize("kind", ["custom_jvp", "custom_vjp"])
def test_custom_rules_in_every_layout(kind):
    count = 0
    for n_diff, pos, values in layouts():
        count += 1
        seen = []

        def fun(*args, pos=pos):
            return value(*split(args, pos))[1]

        if kind == "custom_jvp":
            f = qb.custom_jvp(fun, nondiff_argnums=pos)

            @f.defjvp
            def rule(*rest, pos=pos, n_diff=n_diff):
                *nd, primals, tangents = rest
                seen.append((tuple(nd), type(primals), len(primals), type(tangents), len(tangents)))
                s, out = value(nd, primals)
                # Twice the true tangent, so the test sees that the rule is used.
                t = sum(2.0 * (k + 1) * qb.cos(p) * dt for k, (p, dt) in enumerate(zip(primals, tangents))) * s
                return out, t
        else:
            f = qb.custom_vjp(fun, nondiff_argnums=pos)

            def fwd(*args, pos=pos):
                nd, d = split(args, pos)
                return value(nd, d)[1], tuple(d)

            def bwd(*rest):
                *nd, res, g = rest
                seen.append((tuple(nd), type(res), len(res)))
                s, _ = value(nd, res)
                return tuple(2.0 * (k + 1) * s * qb.cos(x) * g for k, x in enumerate(res))

            f.defvjp(fwd, bwd)

        args = make_args(n_diff, pos, values)
        s = 1.0
        for v in values:
            s *= scale_of(v)
        diff_positions = [i for i in range(len(args)) if i not in pos]
        label = (n_diff, pos, values)
        # The value is fun's.
        want_value = s * sum((k + 1) * np.sin(x) for k, x in enumerate(X[:n_diff]))
        np.testing.assert_allclose(np.asarray(f(*args)), want_value, rtol=1e-14, err_msg=str(label))
        # First derivatives by the rule (twice the true ones), reverse mode for both kinds.
        for k, i in enumerate(diff_positions):
            g = qb.grad(lambda *a, f=f: qb.sum(f(*a)), argnums=i)(*args)
            want = 2.0 * (k + 1) * s * np.cos(X[k])
            np.testing.assert_allclose(np.asarray(g), want, rtol=1e-13, err_msg=str(label))
            jitted = qb.jit(qb.grad(lambda *a, f=f: qb.sum(f(*a)), argnums=i), static_argnums=pos)(*args)
            np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-13, err_msg=str(label))
            # Second derivative: the rule differentiated again.
            h = qb.grad(lambda *a, f=f, i=i: qb.sum(qb.grad(lambda *b: qb.sum(f(*b)), argnums=i)(*a)), argnums=i)(*args)
            np.testing.assert_allclose(np.asarray(h), -2.0 * (k + 1) * s * np.sin(X[k]), rtol=1e-12, err_msg=str(label))
        if kind == "custom_jvp":
            tangents = tuple(qb.ones((2,)) if i in diff_positions else 0.0 for i in range(len(args)))
            tangents = tuple(t for i, t in enumerate(tangents) if i in diff_positions)
            out, t = qb.jvp(lambda *d, f=f, pos=pos, values=values: f(*merge(d, pos, values)), tuple(args[i] for i in diff_positions), tangents)
            want = sum(2.0 * (k + 1) * s * np.cos(x) for k, x in enumerate(X[:n_diff]))
            np.testing.assert_allclose(np.asarray(t), want, rtol=1e-13, err_msg=str(label))
        # vmap over the differentiable arguments.
        batched = qb.vmap(lambda *d, f=f, pos=pos, values=values: qb.sum(f(*merge(d, pos, values))))(
            *[qb.stack([args[i], args[i] * 2.0]) for i in diff_positions]
        )
        assert batched.shape == [2]
        # The rules saw tuples of the differentiable arguments and the nondiff values bare.
        for entry in seen:
            assert entry[0] == tuple(values), (label, entry)
            assert entry[1] is tuple and entry[2] == n_diff, (label, entry)
            if kind == "custom_jvp":
                assert entry[3] is tuple and entry[4] == n_diff, (label, entry)
    assert count >= 20


def merge(d, pos, values):
    """The full argument list from the differentiable ones and the nondiff values."""
    d, vals, out = iter(d), iter(values), []
    for i in range(len(pos) + 10):
        if i in pos:
            out.append(next(vals))
        else:
            try:
                out.append(next(d))
            except StopIteration:
                break
    return out


def test_checkpoint_with_and_without_static_arguments():
    x = qb.asarray(X[0])

    def f(v, n, scale):
        for _ in range(n):
            v = qb.sin(v) * scale
        return qb.sum(v)

    for static in ((), (1,), (1, 2)):
        c = qb.checkpoint(f, static_argnums=static)
        for n, scale in ((2, 1.5), (3, 0.5)):
            np.testing.assert_allclose(np.asarray(c(x, n, scale)), np.asarray(f(x, n, scale)), rtol=1e-15)
            g = qb.grad(c)(x, n, scale)
            np.testing.assert_allclose(np.asarray(g), np.asarray(qb.grad(f)(x, n, scale)), rtol=1e-14)
            h = qb.hessian(c)(x, n, scale)
            np.testing.assert_allclose(np.asarray(h), np.asarray(qb.hessian(f)(x, n, scale)), rtol=1e-13)
