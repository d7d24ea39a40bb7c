"""Ctrl-C wherever Python waits on the library: for every long-running entry point, SIGINT sent
from a timer thread (``os.kill``) raises ``KeyboardInterrupt`` within a fraction of a second, and
the library works normally right after, also when the handler was replaced after the library
first watched for it. Everything runs in a child interpreter with a deadline, so an ignored
interrupt fails this test instead of hanging the suite."""

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    r'''
    import os, signal, sys, threading, time
    # A process started in the background inherits SIGINT ignored, and Python then installs no
    # handler: the Ctrl-C a user would send needs the default one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import quabla as qb

    BIG = 10**12

    def long_fori(x):
        return qb.fori_loop(0, BIG, lambda i, c: qb.sin(c) + 1.0, x)

    def endless(x):
        return qb.while_loop(lambda c: qb.sum(c) > -1.0, lambda c: c + 1.0, x)

    def laplacian(v):
        zero = qb.zeros((1,))
        return 2.0 * v - qb.concat([zero, v[:-1]], 0) - qb.concat([v[1:], zero], 0)

    x = qb.zeros((4,))
    lowered = qb.jit(endless).lower(x)

    def trainer():
        t = qb.optim.Trainer(lambda p: qb.sum(long_fori(p["w"])), {"w": qb.zeros((2,))},
                             qb.optim.SGD(0.1))
        return t.step()

    CASES = {
        "jitted while_loop": lambda: qb.jit(endless)(x),
        "jitted fori_loop": lambda: qb.jit(long_fori)(x),
        "grad of a loop": lambda: qb.grad(lambda x: qb.sum(long_fori(x)))(x),
        "vmap of a loop": lambda: qb.vmap(long_fori)(qb.zeros((3, 2))),
        "eager while_loop": lambda: endless(x),
        "eager fori_loop": lambda: long_fori(x),
        # Per-step outputs are stored: a scalar carry keeps them small.
        "eager scan": lambda: qb.scan(lambda c, i: (c + 1.0, c), qb.zeros(()), length=10**7),
        "odeint fixed-step": lambda: qb.ode.odeint(lambda y, t: -y, x, (0.0, 1.0),
                                                   method="rk4", steps=BIG),
        "odeint adaptive": lambda: qb.ode.odeint(lambda y, t: qb.stack([y[1], -y[0]]),
                                                 qb.asarray([1.0, 0.0]), (0.0, 1e15),
                                                 method="dopri5", max_steps=BIG),
        "Trainer.step": trainer,
        "LBFGS.minimize": lambda: qb.optim.LBFGS().minimize(
            lambda p: qb.sum(long_fori(p) ** 2), qb.ones((2,))),
        # A 1-D Laplacian of 10^6 unknowns: cg needs about as many iterations.
        "cg": lambda: qb.linalg.cg(laplacian, qb.ones((10**6,)), tol=1e-12, maxiter=BIG),
        # Restarted GMRES on the same operator crawls: as long as one likes.
        "gmres": lambda: qb.linalg.gmres(laplacian, qb.ones((10**5,)), tol=1e-12, restart=5,
                                         maxiter=BIG),
        "compiled call": lambda: lowered.compile()(x),
        "program executable": lambda: lowered.program.compile("cpu")({"x": x}),
    }

    def interrupt_after(seconds):
        def fire():
            time.sleep(seconds)
            fired.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        fired = []
        timer = threading.Thread(target=fire, daemon=True)
        timer.start()
        return fired, timer

    bounded = qb.jit(lambda x: qb.while_loop(lambda c: qb.sum(c) < 10.0, lambda c: c + 1.0, x))
    names = sys.argv[1:] or list(CASES)
    for name in names:
        for replaced_handler in ([False, True] if name in ("jitted while_loop", "eager fori_loop")
                         else [False]):
            if replaced_handler:
                # A handler installed after the library chained its own in front: Python
                # replaces the process's handler, and the next call must chain again.
                def user_handler(signum, frame):
                    raise KeyboardInterrupt("user handler")
                signal.signal(signal.SIGINT, user_handler)
            print(f"start|{name}|{replaced_handler}", flush=True)
            fired, timer = interrupt_after(0.3)
            try:
                CASES[name]()
                outcome = "returned"
            except KeyboardInterrupt:
                latency = time.monotonic() - fired[0] if fired else -1.0
                outcome = f"KeyboardInterrupt|{latency:.4f}"
            except BaseException as e:
                outcome = f"other|{type(e).__name__}: {e}"
            # A case that ended early must not leave its interrupt to the next one.
            try:
                timer.join()
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass
            # Nothing is left over for the next call.
            again = bounded(qb.zeros((4,))).tolist()
            print(f"{name}|{replaced_handler}|{outcome}|{again}", flush=True)
    print("done", flush=True)
    '''
)


def test_ctrl_c_raises_keyboard_interrupt_at_every_long_running_entry_point():
    try:
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                             timeout=180)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"an interrupt was ignored; the child printed:\n{e.stdout}") from e
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if not line.startswith("start|")]
    assert lines[-1] == "done", out.stdout + out.stderr
    results = [line.split("|") for line in lines[:-1]]
    assert len(results) == 17, out.stdout
    for name, replaced_handler, outcome, *rest in results:
        assert outcome == "KeyboardInterrupt", (name, replaced_handler, outcome, rest)
        latency, again = float(rest[0]), rest[1]
        # Milliseconds in practice; the bound leaves room for a loaded machine.
        assert 0.0 <= latency < 0.5, (name, replaced_handler, latency)
        assert again == "[3.0, 3.0, 3.0, 3.0]", (name, again)


def test_an_interrupt_outside_a_call_is_not_taken_by_the_next_one():
    child = textwrap.dedent(
        r'''
        import os, signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import quabla as qb
        f = qb.jit(lambda x: qb.fori_loop(0, 100, lambda i, c: c + 1.0, x))
        x = qb.zeros((2,))
        f(x)   # the library's handler is in front of Python's from here on
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)   # Python raises here, between bytecodes
        except KeyboardInterrupt:
            print("raised in Python")
        for _ in range(1000):
            assert f(x).tolist() == [100.0, 100.0]
        print("ok")
        '''
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["raised", "in", "Python", "ok"], out.stdout + out.stderr


def test_a_wakeup_fd_of_the_program_still_receives_the_signal():
    # An event loop's wakeup fd (asyncio's, trio's) sees SIGINT during a library call: the
    # library's handler runs Python's after its own, and leaves the wakeup fd alone.
    child = textwrap.dedent(
        r'''
        import os, signal, socket, threading, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import quabla as qb
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        signal.set_wakeup_fd(ours.fileno())
        endless = qb.jit(lambda x: qb.while_loop(lambda c: qb.sum(c) > -1.0, lambda c: c + 1.0, x))
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            endless(qb.zeros((2,)))
        except KeyboardInterrupt:
            print("interrupted")
        assert signal.set_wakeup_fd(-1) == ours.fileno()
        theirs.settimeout(5.0)
        print(list(theirs.recv(16)))
        '''
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split("\n")[:2] == ["interrupted", "[2]"], out.stdout + out.stderr
