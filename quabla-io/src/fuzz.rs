//! A mutation fuzzer of the reader.
//!
//! [`run_with_probe`] builds a corpus of valid files in memory (random trees of every node
//! kind, plus fixed edge cases: empty containers, the deepest allowed nesting, many arrays),
//! then, per execution, mutates one file (truncations, bit flips, byte overwrites, insertions
//! and deletions, forged header lengths, forged numbers in the header, JSON spliced in from
//! another file, deep bracket runs, trailing bytes) and loads the result under `catch_unwind`
//! twice: with [`read_bytes`] and with [`read`] over a reader that hands out bytes in small
//! random chunks. It counts
//!
//! - panics (there must be none);
//! - loads whose largest single allocation exceeds [`alloc_limit`] of the input length, as
//!   measured by an [`AllocProbe`] (the `fuzz_load` binary installs [`CountingAlloc`] as its
//!   global allocator; the library never installs one);
//! - mismatches: the two readers disagreeing (a different tree, or a different error
//!   message), or an accepted file whose tree does not survive writing and reading again.
//!
//! Everything is deterministic for a given seed.

use crate::node::{Array, Key, Node};
use crate::{read, read_bytes, write, MAX_DEPTH};
use quabla_ir::HostData;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Constant allowance of [`alloc_limit`]: the stream reader's chunk and small bookkeeping.
pub const ALLOC_SLACK: usize = 16 * 1024;

/// The largest single allocation a load of `input_len` bytes may make: twice the input plus
/// [`ALLOC_SLACK`]. Decoded arrays are at most the size of their bytes in the file, a tree
/// node is at most twice the size of its shortest JSON text, and growing buffers at most
/// double what they hold.
pub fn alloc_limit(input_len: usize) -> usize {
    input_len.saturating_mul(2).saturating_add(ALLOC_SLACK)
}

/// Measures the largest single allocation made on the current thread between
/// [`AllocProbe::start`] and [`AllocProbe::stop`].
pub trait AllocProbe {
    /// Starts measuring (forgetting earlier allocations).
    fn start(&self);
    /// Stops measuring; the size in bytes of the largest allocation since `start`.
    fn stop(&self) -> usize;
}

/// A probe that measures nothing (every load reports 0 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProbe;

impl AllocProbe for NoProbe {
    fn start(&self) {}

    fn stop(&self) -> usize {
        0
    }
}

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, recording the largest allocation made on each thread while that
/// thread measures. A binary or test that wants allocation figures installs it:
///
/// ```
/// use quabla_io::fuzz::{AllocProbe, CountingAlloc};
///
/// #[global_allocator]
/// static ALLOC: CountingAlloc = CountingAlloc;
///
/// fn main() {
///     ALLOC.start();
///     let buffer = vec![0u8; 1000];
///     assert!(ALLOC.stop() >= 1000);
///     drop(buffer);
/// }
/// ```
///
/// Measuring is per thread, so tests running in parallel do not see each other's
/// allocations.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

fn record(size: usize) {
    // `try_with` fails only while the thread is being torn down; nothing is measured then.
    // These thread-locals are const-initialized cells without destructors, so touching them
    // never allocates, which keeps this safe to call from inside the allocator.
    let _ = MEASURING.try_with(|measuring| {
        if measuring.get() {
            let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; `record` only reads and writes
// thread-local cells and never allocates or unwinds.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract, which is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller upholds the rest
        // of `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

impl AllocProbe for CountingAlloc {
    fn start(&self) {
        LARGEST.with(|l| l.set(0));
        MEASURING.with(|m| m.set(true));
    }

    fn stop(&self) -> usize {
        MEASURING.with(|m| m.set(false));
        LARGEST.with(Cell::get)
    }
}

/// What a fuzz run found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FuzzReport {
    /// Mutated inputs loaded (each with both readers).
    pub execs: u64,
    /// Loads that panicked.
    pub panics: u64,
    /// Loads whose largest allocation exceeded [`alloc_limit`] of the input length.
    pub oversize: u64,
    /// Inputs on which the readers disagreed, or whose tree did not survive a rewrite.
    pub mismatches: u64,
    /// Inputs that loaded as valid files.
    pub accepted: u64,
    /// The largest single allocation of any load, in bytes.
    pub max_alloc_bytes: usize,
    /// The length of the input that made it.
    pub max_alloc_input_bytes: usize,
    /// The longest input loaded, in bytes.
    pub input_max_bytes: usize,
    /// The first few failures, described with the input in hex.
    pub failures: Vec<String>,
}

impl FuzzReport {
    /// Whether the run found nothing wrong.
    pub fn passed(&self) -> bool {
        self.panics == 0 && self.oversize == 0 && self.mismatches == 0
    }

    /// The one-line summary the `fuzz_load` binary prints.
    pub fn summary(&self) -> String {
        format!(
            "execs={} panics={} oversize={} mismatches={} accepted={} max_alloc={} bytes \
             (input {} bytes) input_max={} bytes",
            self.execs,
            self.panics,
            self.oversize,
            self.mismatches,
            self.accepted,
            self.max_alloc_bytes,
            self.max_alloc_input_bytes,
            self.input_max_bytes
        )
    }

    fn fail(&mut self, what: &str, input: &[u8]) {
        if self.failures.len() < 8 {
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            self.failures.push(format!("{what}: input {hex}"));
        }
    }
}

/// Runs `execs` mutated loads from `seed` without measuring allocations.
pub fn run(execs: u64, seed: u64) -> FuzzReport {
    run_with_probe(execs, seed, &NoProbe)
}

/// Runs `execs` mutated loads from `seed`, measuring each load's allocations with `probe`.
pub fn run_with_probe(execs: u64, seed: u64, probe: &dyn AllocProbe) -> FuzzReport {
    let mut rng = Rng(seed);
    let corpus = corpus(rng.next());
    let mut report = FuzzReport::default();
    for _ in 0..execs {
        let Some(base) = corpus.get(rng.below(corpus.len())) else {
            break;
        };
        let input = mutate(&mut rng, base, &corpus);
        let chunk_seed = rng.next();
        exec(&input, chunk_seed, probe, &mut report);
    }
    report
}

/// Loads one input with both readers and records what happened.
fn exec(input: &[u8], chunk_seed: u64, probe: &dyn AllocProbe, report: &mut FuzzReport) {
    report.execs += 1;
    report.input_max_bytes = report.input_max_bytes.max(input.len());
    let limit = alloc_limit(input.len());

    probe.start();
    let from_slice = catch_unwind(AssertUnwindSafe(|| read_bytes(input)));
    let slice_alloc = probe.stop();

    let mut chunked = Chunked {
        data: input,
        rng: Rng(chunk_seed),
    };
    probe.start();
    let from_stream = catch_unwind(AssertUnwindSafe(|| read(&mut chunked)));
    let stream_alloc = probe.stop();

    for alloc in [slice_alloc, stream_alloc] {
        if alloc > report.max_alloc_bytes {
            report.max_alloc_bytes = alloc;
            report.max_alloc_input_bytes = input.len();
        }
        if alloc > limit {
            report.oversize += 1;
            report.fail(&format!("allocation of {alloc} bytes"), input);
        }
    }
    let (from_slice, from_stream) = match (from_slice, from_stream) {
        (Ok(a), Ok(b)) => (a, b),
        _ => {
            report.panics += 1;
            report.fail("panic", input);
            return;
        }
    };
    match (&from_slice, &from_stream) {
        (Ok(a), Ok(b)) if a == b => {
            report.accepted += 1;
            if !rewrites_to_itself(a) {
                report.mismatches += 1;
                report.fail("tree changed by a rewrite", input);
            }
        }
        (Err(a), Err(b)) if a.to_string() == b.to_string() => {}
        _ => {
            report.mismatches += 1;
            report.fail("the readers disagree", input);
        }
    }
}

/// Whether writing `tree` and reading it back gives the same tree.
fn rewrites_to_itself(tree: &Node) -> bool {
    let mut bytes = Vec::new();
    write(tree, &mut bytes).is_ok() && read_bytes(&bytes).is_ok_and(|back| &back == tree)
}

/// A reader that hands out its bytes in chunks of random small sizes, as pipes and sockets do.
struct Chunked<'a> {
    data: &'a [u8],
    rng: Rng,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.data.len()).min(1 + self.rng.below(64));
        let (head, tail) = self.data.split_at(n);
        buf[..n].copy_from_slice(head);
        self.data = tail;
        Ok(n)
    }
}

/// SplitMix64: small, fast and deterministic.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = self.0;
        let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len()))
    }
}

/// Valid files: random trees and fixed edge cases, written by [`write`].
pub fn corpus(seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let mut trees: Vec<Node> = (0..48).map(|_| random_tree(&mut rng, 0)).collect();
    trees.push(Node::None);
    trees.push(Node::List(Vec::new()));
    trees.push(Node::Tuple(Vec::new()));
    trees.push(Node::Dict(Vec::new()));
    trees.push(array_node(
        &[],
        HostData::F64(Arc::from([f64::from_bits(0x7ff8_dead_beef_0001)])),
    ));
    let mut deep = Node::Int(7);
    for level in 0..MAX_DEPTH {
        deep = if level % 2 == 0 {
            Node::List(vec![deep])
        } else {
            Node::Dict(vec![(Key::Int(level as i64), deep)])
        };
    }
    trees.push(deep);
    trees.push(Node::List(
        (0..40)
            .map(|i| {
                array_node(
                    &[1 + i % 3],
                    HostData::Bool((0..1 + i % 3).map(|j| j % 2 == 0).collect()),
                )
            })
            .collect(),
    ));
    trees
        .iter()
        .filter_map(|t| {
            let mut bytes = Vec::new();
            write(t, &mut bytes).ok().map(|()| bytes)
        })
        .collect()
}

fn array_node(shape: &[usize], data: HostData) -> Node {
    Array::new(shape.to_vec(), data).map_or(Node::None, Node::Array)
}

fn random_tree(rng: &mut Rng, depth: usize) -> Node {
    let container = depth < 4 && rng.below(3) == 0;
    if container {
        let n = rng.below(5);
        return match rng.below(3) {
            0 => Node::List((0..n).map(|_| random_tree(rng, depth + 1)).collect()),
            1 => Node::Tuple((0..n).map(|_| random_tree(rng, depth + 1)).collect()),
            _ => Node::Dict(
                (0..n)
                    .map(|i| {
                        let key = if rng.chance(2) {
                            Key::Int(i as i64 - 2)
                        } else {
                            Key::Str(format!("k{i}\u{e9}\"\n"))
                        };
                        (key, random_tree(rng, depth + 1))
                    })
                    .collect(),
            ),
        };
    }
    match rng.below(8) {
        0 => Node::None,
        1 => Node::Bool(rng.chance(2)),
        2 => Node::Int(match rng.below(4) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.next() as i64 >> rng.below(64),
        }),
        3 => Node::Float(match rng.below(6) {
            0 => -0.0,
            1 => f64::INFINITY,
            2 => f64::NAN,
            3 => 5e-324,
            _ => f64::from_bits(rng.next()),
        }),
        4 => Node::Str(["", "s", "\u{1F600} tab\t", "\\\"/"][rng.below(4)].to_owned()),
        _ => {
            let rank = rng.below(4);
            let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
            let n: usize = shape.iter().product();
            let data = match rng.below(3) {
                0 => HostData::F64((0..n).map(|_| f64::from_bits(rng.next())).collect()),
                1 => HostData::F32((0..n).map(|_| f32::from_bits(rng.next() as u32)).collect()),
                _ => HostData::Bool((0..n).map(|_| rng.chance(2)).collect()),
            };
            array_node(&shape, data)
        }
    }
}

/// Numbers that break naive length arithmetic.
const FORGED_NUMBERS: &[&str] = &[
    "0",
    "1",
    "7",
    "-1",
    "-0",
    "1.5",
    "1e400",
    "4611686018427387904",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "4294967296",
];

/// JSON fragments that probe the schema.
const FRAGMENTS: &[&str] = &[
    r#"{"type":"none"}"#,
    r#"{"type":"array","dtype":"bool","shape":[],"offset":0,"nbytes":1}"#,
    r#"{"type":"array","dtype":"float64","shape":[4611686018427387904],"offset":0,"nbytes":0}"#,
    r#"{"type":"list","items":[]}"#,
    r#"{"type":"dict","items":[[{"type":"int","value":"1"},{"type":"none"}],[{"type":"int","value":"1"},{"type":"none"}]]}"#,
    r#""type":"#,
    r#""nbytes":"#,
    r#""version":2,"#,
    r#"\ud800"#,
    "\u{feff}",
    ",",
    "]",
    "}",
    "\"",
    "null",
];

fn mutate(rng: &mut Rng, base: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut input = base.to_vec();
    for _ in 0..1 + rng.below(3) {
        mutate_once(rng, &mut input, corpus);
    }
    input
}

fn mutate_once(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    match rng.below(12) {
        0 => {
            let keep = rng.below(input.len() + 1);
            input.truncate(keep);
        }
        1 => {
            if !input.is_empty() {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
        }
        2 => {
            if !input.is_empty() {
                let i = rng.below(input.len());
                let interesting = [0x00, 0x01, 0x02, 0x7f, 0x80, 0xff, b'"', b'[', b'{', b'9'];
                input[i] = if rng.chance(2) {
                    interesting[rng.below(interesting.len())]
                } else {
                    rng.next() as u8
                };
            }
        }
        3 => {
            let at = rng.below(input.len() + 1);
            let bytes: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
            input.splice(at..at, bytes);
        }
        4 => {
            if !input.is_empty() {
                let at = rng.below(input.len());
                let end = (at + 1 + rng.below(16)).min(input.len());
                input.drain(at..end);
            }
        }
        5 => forge_header_len(rng, input),
        6 => edit_header(rng, input, forge_number),
        7 => {
            let donor = rng.pick(corpus).cloned().unwrap_or_default();
            edit_header(rng, input, |rng, header| {
                splice(rng, header, header_of(&donor))
            });
        }
        8 => edit_header(rng, input, |rng, header| {
            let at = rng.below(header.len() + 1);
            let depth = 1 + rng.below(400);
            let open = if rng.chance(2) {
                "["
            } else {
                r#"{"type":"list","items":["#
            };
            let run: Vec<u8> = open.repeat(depth).into_bytes();
            header.splice(at..at, run);
        }),
        9 => edit_header(rng, input, |rng, header| {
            let at = rng.below(header.len() + 1);
            let fragment = FRAGMENTS[rng.below(FRAGMENTS.len())];
            header.splice(at..at, fragment.bytes());
        }),
        10 => {
            let extra: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
            input.extend(extra);
        }
        _ => edit_header(rng, input, |rng, header| {
            // Swap one dtype or type name for another.
            let names: [&[u8]; 6] = [b"float64", b"float32", b"bool", b"list", b"tuple", b"dict"];
            let from = names[rng.below(names.len())];
            let to = names[rng.below(names.len())];
            if let Some(at) = find(header, from) {
                header.splice(at..at + from.len(), to.iter().copied());
            }
        }),
    }
}

/// The header bytes of a well-formed file, or nothing.
fn header_of(file: &[u8]) -> &[u8] {
    let Some(len) = file.get(8..16).and_then(|f| <[u8; 8]>::try_from(f).ok()) else {
        return &[];
    };
    let len = u64::from_le_bytes(len);
    usize::try_from(len)
        .ok()
        .and_then(|n| file.get(16..16usize.checked_add(n)?))
        .unwrap_or(&[])
}

/// Applies `edit` to the header of `input` (when its length field is plausible) and, most of
/// the time, rewrites the length field to match, so that the edit reaches the schema checks.
fn edit_header(rng: &mut Rng, input: &mut Vec<u8>, edit: impl FnOnce(&mut Rng, &mut Vec<u8>)) {
    let header = header_of(input);
    if header.is_empty() {
        return;
    }
    let old_len = header.len();
    let mut header = header.to_vec();
    edit(rng, &mut header);
    let fix_len = !rng.chance(4);
    let mut out = Vec::with_capacity(input.len() + header.len());
    out.extend_from_slice(&input[..8]);
    let len = if fix_len { header.len() } else { old_len } as u64;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&input[16 + old_len..]);
    *input = out;
}

fn forge_header_len(rng: &mut Rng, input: &mut [u8]) {
    let Some(field) = input.get_mut(8..16) else {
        return;
    };
    let current = <[u8; 8]>::try_from(&*field).map_or(0, u64::from_le_bytes);
    let forged: u64 = match rng.below(6) {
        0 => rng.next(),
        1 => 1 << 62,
        2 => u64::MAX,
        3 => 0,
        4 => current.wrapping_add(1 + rng.below(16) as u64),
        _ => current.wrapping_sub(1 + rng.below(16) as u64),
    };
    field.copy_from_slice(&forged.to_le_bytes());
}

/// Replaces one run of digits in `header` with a forged number.
fn forge_number(rng: &mut Rng, header: &mut Vec<u8>) {
    let starts: Vec<usize> = (0..header.len())
        .filter(|&i| header[i].is_ascii_digit() && (i == 0 || !header[i - 1].is_ascii_digit()))
        .collect();
    let Some(&start) = rng.pick(&starts) else {
        return;
    };
    let end = (start..header.len())
        .find(|&i| !header[i].is_ascii_digit())
        .unwrap_or(header.len());
    let number = FORGED_NUMBERS[rng.below(FORGED_NUMBERS.len())];
    header.splice(start..end, number.bytes());
}

/// Replaces a random range of `header` with a random range of `donor`.
fn splice(rng: &mut Rng, header: &mut Vec<u8>, donor: &[u8]) {
    let at = rng.below(header.len() + 1);
    let end = (at + rng.below(64)).min(header.len());
    let from = rng.below(donor.len() + 1);
    let to = (from + rng.below(256)).min(donor.len());
    header.splice(at..end, donor[from..to].iter().copied());
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_valid() {
        let corpus = corpus(1);
        assert!(corpus.len() > 50);
        for file in &corpus {
            read_bytes(file).unwrap();
        }
    }

    #[test]
    fn a_short_run_finds_nothing() {
        let report = run(3000, 7);
        assert_eq!(report.execs, 3000);
        assert!(
            report.passed(),
            "{}\n{:?}",
            report.summary(),
            report.failures
        );
        assert!(report.accepted > 0);
        assert!(report.accepted < report.execs);
    }
}
