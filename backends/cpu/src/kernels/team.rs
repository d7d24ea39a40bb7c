//! The executor's helper threads: a team that runs the parts of a split kernel with a
//! hand-off of well under a microsecond.
//!
//! A plan runs its large steps one after another, each split into one part per thread, with
//! a few microseconds of serial work between them. Handing a part to rayon's pool wakes a
//! sleeping worker: on the two-core machines we measure on, the part then starts 17 µs
//! (back to back) to 44 µs (after 200 µs of serial work) late, the caller waits for it, and
//! the MLP training step's products and `tanh` groups took 20–40 µs longer split than the
//! even halves of their single-thread time.
//!
//! The team's helpers spin on a generation counter for [`SPIN`] after each part (so the next
//! step of a plan finds them awake) and then park; publishing a job bumps the counter and
//! unparks the parked ones. Part `p` always goes to participant `p` (helper `p`, the calling
//! thread last), so a step that splits the rows of a value the same way as the step that
//! wrote it reads its part from the same core's cache.
//!
//! Kernels that split their work on rayon's pool instead call [`rest`] first, which parks
//! the spinning helpers at once.
//!
//! The team is one per process and serves one job at a time: a caller that finds it busy
//! (another executor running on another thread, or a part that splits its own work) runs its
//! job on rayon's pool as before. A panic in a part is caught on the helper and resumed on
//! the caller once every part has finished, so no part outlives the borrowed data it runs on.
//! Which thread runs a part never changes a result: the parts are fixed pieces of the work.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long a helper spins for the next job before it parks. The serial work between two
/// split steps of a plan is shorter; a caller that runs no plan for this long finds the
/// helpers parked and pays the wake-up once.
const SPIN: Duration = Duration::from_micros(300);
/// After this much of [`SPIN`] a waiting helper yields its core between checks, so threads
/// that have work there (rayon's workers in a parallel factorization, another process) get it.
const SPIN_ALONE: Duration = Duration::from_micros(5);

/// Helpers the team starts at most (a machine with more threads splits among these).
const MAX_HELPERS: usize = 63;

/// The job of one hand-off: `run(p)` runs participant `p`'s parts, for `participants`
/// participants. It lives on the caller's stack until every helper has finished with it.
struct Job<'a> {
    run: &'a (dyn Fn(usize) + Sync),
    participants: usize,
}

/// What the caller and the helpers share.
struct Shared {
    /// Bumped (with release ordering) once the job pointer is published.
    generation: AtomicU64,
    /// The current job (a `Job` on the caller's stack, with its lifetime erased).
    job: AtomicPtr<Job<'static>>,
    /// Helpers done with the current job.
    finished: AtomicUsize,
    /// The first panic payload of the current job's helpers.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Set by [`rest`]: waiting helpers park now instead of spinning out [`SPIN`].
    rest: AtomicBool,
}

struct Helper {
    thread: Thread,
    /// The helper has parked, or is about to: the caller must unpark it.
    sleeping: Arc<AtomicBool>,
}

/// The process's team: its helpers, guarded by the lock a caller holds for one job.
struct Team {
    shared: Arc<Shared>,
    helpers: Vec<Helper>,
    /// The process the helpers run in: a child made by `fork` has none of them, and
    /// starts its own (see [`Team::forked`]).
    process: u32,
}

fn team() -> &'static Mutex<Team> {
    static TEAM: OnceLock<Mutex<Team>> = OnceLock::new();
    TEAM.get_or_init(|| Mutex::new(Team::new()))
}

/// Runs `run(p)` for every participant `p` in `0..participants`, participant `p < last` on
/// helper `p` and the last on the calling thread, and returns when all have finished (a
/// panic in any of them is resumed here). Returns `false`, having run nothing, when the team
/// is busy, cannot start enough helpers, or would need more than [`MAX_HELPERS`] of them.
pub(crate) fn run_parts(participants: usize, run: &(dyn Fn(usize) + Sync)) -> bool {
    // More participants than helpers plus the caller would leave the rest unrun.
    if participants > MAX_HELPERS + 1 {
        return false;
    }
    let mut team = match team().try_lock() {
        Ok(team) => team,
        Err(TryLockError::WouldBlock) => return false,
        // A poisoned lock: a caller panicked outside a part (never expected); the helpers
        // and the shared state are still consistent, since every job waits for its helpers.
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
    };
    team.forked();
    let helpers = participants.saturating_sub(1).min(MAX_HELPERS);
    if helpers == 0 || !team.grow(helpers) {
        return false;
    }
    let shared = Arc::clone(&team.shared);
    let job = Job {
        run,
        participants: helpers + 1,
    };
    shared.finished.store(0, Ordering::Relaxed);
    shared.rest.store(false, Ordering::Relaxed);
    // SAFETY of the erased lifetime: the job is read only by helpers between the bump below
    // and their increment of `finished`, and this function does not return (or unwind)
    // before every started helper has incremented it.
    let erased = (&job as *const Job<'_>).cast::<Job<'static>>().cast_mut();
    shared.job.store(erased, Ordering::Relaxed);
    shared.generation.fetch_add(1, Ordering::SeqCst);
    for h in &team.helpers {
        if h.sleeping.swap(false, Ordering::SeqCst) {
            h.thread.unpark();
        }
    }
    let mine = panic::catch_unwind(AssertUnwindSafe(|| run(helpers)));
    // Every helper, the ones beyond this job's participants included, answers each job.
    let all = team.helpers.len();
    while shared.finished.load(Ordering::Acquire) < all {
        std::hint::spin_loop();
    }
    shared.job.store(std::ptr::null_mut(), Ordering::Relaxed);
    let theirs = shared
        .panic
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    drop(team);
    if let Err(payload) = mine {
        panic::resume_unwind(payload);
    }
    if let Some(payload) = theirs {
        panic::resume_unwind(payload);
    }
    true
}

/// Whether a kernel that goes through the rows of a value in order relays over the threads
/// ([`relay`]) instead of splitting its columns: for an operand of `bytes` split by rows over
/// `threads` threads, when those bands are still in the cores' caches (a few MiB) and the
/// threads are few. A relay runs its stages one after another, so it wins only while reading
/// every band from its own core's cache beats reading the bands in parallel from the others'.
pub(crate) fn relays(threads: usize, bytes: usize) -> bool {
    (2..=RELAY_MAX_THREADS).contains(&threads) && bytes <= RELAY_MAX_BYTES
}

/// The most threads a [`relay`] runs on (see [`relays`]).
const RELAY_MAX_THREADS: usize = 4;
/// The largest operand a [`relay`] goes through (see [`relays`]).
const RELAY_MAX_BYTES: usize = 4 << 20;

/// Runs `run(0)`, `run(1)`, ..., `run(stages - 1)` one after another, stage `p` on
/// participant `p`'s thread (helper `p`, the calling thread last): a sequential computation
/// over a value an earlier step split by rows over the threads, each stage reading (about)
/// the band of rows its own core wrote; in the MLP step, reading half of them from the other
/// core's cache had taken 27–28 µs where the relay takes 17–18. Stage `p` starts once stage
/// `p - 1` has returned, so the stages may hand state to each other through the closure, and
/// the result is the one-thread result. When the team is busy the stages run in order on
/// the calling thread. On the team a stage that panics still lets the next ones run, and a
/// panic is resumed here once every stage has finished (the caller's own first); in order
/// on the calling thread the first panic ends the relay.
pub(crate) fn relay(stages: usize, run: &(dyn Fn(usize) + Sync)) {
    /// Advances the relay when its stage returns or unwinds.
    struct Next<'a>(&'a AtomicUsize, usize);
    impl Drop for Next<'_> {
        fn drop(&mut self) {
            self.0.store(self.1, Ordering::Release);
        }
    }
    let done = AtomicUsize::new(0);
    let stage = |p: usize| {
        // A stage waits as long as the one before it runs: it spins, and past a few
        // microseconds yields its core between checks (on a machine with fewer cores than
        // threads the stage it waits for may need this core).
        let mut spins = 0u32;
        while done.load(Ordering::Acquire) != p {
            spins = spins.saturating_add(1);
            if spins > 1 << 12 {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let _next = Next(&done, p + 1);
        run(p);
    };
    if stages < 2 || !run_parts(stages, &stage) {
        (0..stages).for_each(run);
    }
}

/// [`relay`] over the rows `0..rows` cut into one band per thread, with boundaries at
/// multiples of `align` as a split step cuts them (`kernels::split_ranges`): `work(state,
/// band)` for each band in order, each on its participant, `state` handed from one to the
/// next.
pub(crate) fn relay_rows<S: ?Sized + Send>(
    rows: usize,
    (threads, align): (usize, usize),
    state: &mut S,
    work: impl Fn(&mut S, std::ops::Range<usize>) + Sync,
) {
    let bands = super::split_ranges(rows, threads, align);
    let state = Mutex::new(state);
    relay(bands.len(), &|stage| {
        let (first, end) = bands[stage];
        let mut state = state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        work(&mut state, first..end);
    });
}

/// Parks the waiting helpers now: called before a kernel that splits its work on rayon's
/// pool, whose workers need the cores the helpers would spin on (the panels of a large LU
/// solve, faer's parallel product). A no-op while the team runs a job.
pub(crate) fn rest() {
    if let Ok(team) = team().try_lock() {
        team.shared.rest.store(true, Ordering::Relaxed);
    }
}

impl Team {
    fn new() -> Team {
        Team {
            shared: Arc::new(Shared {
                generation: AtomicU64::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
                finished: AtomicUsize::new(0),
                panic: Mutex::new(None),
                rest: AtomicBool::new(false),
            }),
            helpers: Vec::new(),
            process: std::process::id(),
        }
    }

    /// Starts afresh in a child process made by `fork` (a Python `multiprocessing` worker,
    /// say), where the parent's helper threads do not exist: waiting for them would hang.
    /// The parent's shared state is left to them (leaked in the child).
    fn forked(&mut self) {
        if self.process != std::process::id() {
            std::mem::forget(std::mem::replace(self, Team::new()));
        }
    }

    /// Starts helpers until there are at least `n`; false if a thread cannot be started.
    fn grow(&mut self, n: usize) -> bool {
        while self.helpers.len() < n {
            let index = self.helpers.len();
            let shared = Arc::clone(&self.shared);
            let sleeping = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&sleeping);
            // A new helper must not take the job already published as its first.
            let seen = shared.generation.load(Ordering::SeqCst);
            let started = thread::Builder::new()
                .name(format!("quabla-cpu-{}", index + 1))
                .spawn(move || helper(index, seen, &shared, &flag));
            match started {
                Ok(handle) => self.helpers.push(Helper {
                    thread: handle.thread().clone(),
                    sleeping,
                }),
                Err(_) => return false,
            }
        }
        true
    }
}

/// A helper's loop: wait for the next generation (spinning, then parked), run its part of
/// the job, report.
fn helper(index: usize, mut seen: u64, shared: &Shared, sleeping: &AtomicBool) {
    loop {
        let since = Instant::now();
        let mut spins = 0u32;
        loop {
            let now = shared.generation.load(Ordering::Acquire);
            if now != seen {
                seen = now;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                let waited = since.elapsed();
                if waited > SPIN || shared.rest.load(Ordering::Relaxed) {
                    sleeping.store(true, Ordering::SeqCst);
                    if shared.generation.load(Ordering::SeqCst) == seen {
                        thread::park();
                    }
                    sleeping.store(false, Ordering::SeqCst);
                    continue;
                }
                if waited > SPIN_ALONE {
                    thread::yield_now();
                }
            }
            std::hint::spin_loop();
        }
        // SAFETY: published before the generation bump this helper just observed, and kept
        // alive by the caller until this helper increments `finished`.
        let job = unsafe { &*shared.job.load(Ordering::Acquire) };
        if index < job.participants - 1 {
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| (job.run)(index))) {
                let mut slot = shared.panic.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(payload);
            }
        }
        shared.finished.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`run_parts`], waiting while another test of this process holds the team.
    fn run_parts(participants: usize, run: &(dyn Fn(usize) + Sync)) -> bool {
        while !super::run_parts(participants, run) {
            thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn every_participant_runs_once_on_its_own_thread() {
        for participants in [2, 3, 2] {
            let ran: Vec<Mutex<Option<thread::ThreadId>>> =
                (0..participants).map(|_| Mutex::new(None)).collect();
            let counts: Vec<AtomicUsize> = (0..participants).map(|_| AtomicUsize::new(0)).collect();
            assert!(run_parts(participants, &|p| {
                counts[p].fetch_add(1, Ordering::SeqCst);
                *ran[p].lock().unwrap() = Some(thread::current().id());
            }));
            assert!(counts.iter().all(|c| c.load(Ordering::SeqCst) == 1));
            let ids: Vec<_> = ran.iter().map(|r| r.lock().unwrap().unwrap()).collect();
            assert_eq!(ids[participants - 1], thread::current().id());
            for (i, a) in ids.iter().enumerate() {
                assert!(ids[i + 1..].iter().all(|b| b != a), "{ids:?}");
            }
        }
    }

    #[test]
    fn a_panic_in_a_helper_reaches_the_caller_after_every_part() {
        let finished = AtomicUsize::new(0);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            run_parts(2, &|p| {
                if p == 0 {
                    panic!("part zero");
                }
                thread::sleep(Duration::from_millis(20));
                finished.fetch_add(1, Ordering::SeqCst);
            })
        }));
        let payload = result.expect_err("the helper's panic is resumed");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"part zero"));
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        // The team still works.
        let sum = AtomicUsize::new(0);
        assert!(run_parts(2, &|p| {
            sum.fetch_add(p + 1, Ordering::SeqCst);
        }));
        assert_eq!(sum.load(Ordering::SeqCst), 3);
    }

    /// Runs `body` until one of its runs took the team (it returns whether it did): while
    /// another test of this process holds the team, a relay runs on the calling thread.
    fn until_on_the_team(mut body: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if body() {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
        panic!("the team stayed busy");
    }

    #[test]
    fn a_relay_runs_its_stages_in_order_each_on_its_participant() {
        for stages in [2, 3] {
            until_on_the_team(|| {
                // Stage `p` sleeps longer the earlier it is, so stages that did not wait for
                // their predecessors would record themselves out of order.
                let order = Mutex::new(Vec::new());
                let threads: Vec<Mutex<Option<thread::ThreadId>>> =
                    (0..stages).map(|_| Mutex::new(None)).collect();
                relay(stages, &|p| {
                    thread::sleep(Duration::from_millis(5 * (stages - p) as u64));
                    order.lock().unwrap().push(p);
                    *threads[p].lock().unwrap() = Some(thread::current().id());
                });
                assert_eq!(*order.lock().unwrap(), (0..stages).collect::<Vec<_>>());
                let ids: Vec<_> = threads.iter().map(|t| t.lock().unwrap().unwrap()).collect();
                assert_eq!(ids[stages - 1], thread::current().id());
                // On the team every stage has a thread of its own.
                (0..stages).all(|i| ids[i + 1..].iter().all(|b| *b != ids[i]))
            });
        }
    }

    #[test]
    fn a_panicking_stage_lets_the_relay_finish() {
        until_on_the_team(|| {
            let first = Mutex::new(None);
            let later = AtomicUsize::new(0);
            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                relay(2, &|p| {
                    if p == 0 {
                        *first.lock().unwrap() = Some(thread::current().id());
                        panic!("stage zero");
                    }
                    later.fetch_add(1, Ordering::SeqCst);
                })
            }));
            let payload = result.expect_err("the stage's panic is resumed");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"stage zero"));
            let on_the_team = *first.lock().unwrap() != Some(thread::current().id());
            // On the team the later stage still ran; on this thread the panic ended it.
            assert_eq!(later.load(Ordering::SeqCst), usize::from(on_the_team));
            on_the_team
        });
    }

    #[test]
    fn more_participants_than_helpers_run_elsewhere_or_all() {
        let ran = AtomicUsize::new(0);
        assert!(!super::run_parts(MAX_HELPERS + 2, &|_| {
            ran.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        // A relay of that many stages runs every one of them, in order.
        let order = Mutex::new(Vec::new());
        relay(MAX_HELPERS + 2, &|p| order.lock().unwrap().push(p));
        assert_eq!(
            *order.lock().unwrap(),
            (0..MAX_HELPERS + 2).collect::<Vec<_>>()
        );
        // And a split of that many items runs every item once.
        let counts: Vec<AtomicUsize> = (0..MAX_HELPERS + 6).map(|_| AtomicUsize::new(0)).collect();
        crate::kernels::par_for_each((0..counts.len()).collect(), counts.len(), |i| {
            counts[i].fetch_add(1, Ordering::SeqCst);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::SeqCst) == 1));
    }

    #[test]
    fn parked_helpers_wake_for_the_next_job() {
        let count = AtomicUsize::new(0);
        for _ in 0..3 {
            thread::sleep(SPIN * 3);
            assert!(run_parts(2, &|_| {
                count.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert_eq!(count.load(Ordering::SeqCst), 6);
    }
}
