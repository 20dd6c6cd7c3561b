//! Recordings as a hostile or damaged file would have them: real ones
//! (`tests/fuzz/corpus`), mutated, through everything `dump`, `report` and
//! `flamegraph` do with them. Each input must end, without a panic, within
//! [`HANG`], on at most `replay::MEMORY_BASE + replay::MEMORY_PER_BYTE` × its
//! size of heap. Inputs that did not are kept in `tests/fuzz/regressions`
//! and replayed by every run.
//!
//! `TT_FUZZ_INPUTS` (default 5000: the slice every `make test` and CI run),
//! `TT_FUZZ_SEED` (default fixed; printed), `TT_FUZZ_THREADS` (default: the
//! CPUs); `make fuzz` runs 10 million from a new seed.

#[path = "fuzz/harness.rs"]
mod fuzz_support;

use fuzz_support::{alloc, mutate::Mutator, run_input};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting;

/// An input still running after this is a hang.
const HANG: Duration = Duration::from_secs(2);

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(name)
}

fn files(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found: Vec<_> = std::fs::read_dir(dir(name))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.sort();
    found
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "tt"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().expect(name))
}

/// The input a worker runs, and since when, for the watchdog.
#[derive(Default)]
struct Running {
    since_ms: AtomicU64,
    input: Mutex<Vec<u8>>,
}

/// Keeps `bytes` as a finding and names it.
fn keep_finding(kind: &str, bytes: &[u8]) -> PathBuf {
    let out = dir("findings");
    std::fs::create_dir_all(&out).unwrap();
    let path = out.join(format!("{kind}-{:08x}.tt", crc32fast::hash(bytes)));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn mutated_recordings_end_quickly_in_bounded_memory() {
    let corpus = files("corpus");
    assert!(corpus.len() >= 5, "the corpus is in tests/fuzz/corpus");
    // Each also as `record` writes: out of time order, for the reader to sort.
    let scratch = std::env::temp_dir();
    let seeds: Vec<Vec<u8>> = corpus
        .iter()
        .flat_map(|(_, b)| {
            [
                b.clone(),
                fuzz_support::written_out_of_time_order(b, &scratch),
            ]
        })
        .collect();
    let inputs = env_u64("TT_FUZZ_INPUTS").unwrap_or(5_000);
    // A fixed slice by default, so a run is repeatable; `make fuzz` picks a new seed.
    let seed = env_u64("TT_FUZZ_SEED").unwrap_or(20_261_126);
    let threads = env_u64("TT_FUZZ_THREADS")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    eprintln!(
        "fuzz: {inputs} inputs from {} recordings, seed {seed}, {threads} threads",
        seeds.len()
    );
    let started = Instant::now();
    let running: Vec<Running> = (0..threads).map(|_| Running::default()).collect();
    let next = AtomicU64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let totals = Mutex::new(fuzz_support::Totals::default());
    std::thread::scope(|scope| {
        scope.spawn(|| watchdog(&running, &done, started));
        let workers: Vec<_> = running
            .iter()
            .map(|slot| {
                let (seeds, next, totals) = (&seeds, &next, &totals);
                scope.spawn(move || {
                    let mutator = Mutator::new(seeds);
                    let mut mine = fuzz_support::Totals::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= inputs {
                            break;
                        }
                        // Input i of the seed: a finding is found again from the two.
                        let input = mutator.input(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
                        *slot.input.lock().unwrap() = input.clone();
                        slot.since_ms
                            .store(started.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
                        let ran = run_checked(&input, i);
                        slot.since_ms.store(0, Ordering::SeqCst);
                        mine.add(&input, &ran);
                        if i % 1_000_000 == 999_999 {
                            eprintln!(
                                "fuzz: {} inputs in {:.0} s",
                                i + 1,
                                started.elapsed().as_secs_f64()
                            );
                        }
                    }
                    totals.lock().unwrap().merge(mine);
                })
            })
            .collect();
        // The watchdog stops before a worker's panic is passed on, or the
        // scope would wait for it forever.
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        for result in joined {
            result.unwrap();
        }
    });
    let totals = totals.into_inner().unwrap();
    eprintln!(
        "fuzz: {inputs} inputs in {:.1} s, {}; max RSS {} MiB",
        started.elapsed().as_secs_f64(),
        totals,
        fuzz_support::max_rss_bytes() >> 20
    );
    assert!(
        totals.findings.is_empty(),
        "findings kept: {:#?}",
        totals.findings
    );
}

/// One input, its heap and time measured; what broke a bound kept.
fn run_checked(input: &[u8], turn: u64) -> fuzz_support::Ran {
    let bound =
        tenge_trace::replay::MEMORY_BASE + tenge_trace::replay::MEMORY_PER_BYTE * input.len();
    alloc::start(input, bound);
    let started = Instant::now();
    let outcome = run_input(input, turn);
    let elapsed = started.elapsed();
    let peak = alloc::stop();
    let mut finding = None;
    if peak > bound {
        finding = Some(keep_finding("memory", input));
    }
    if matches!(outcome, fuzz_support::Outcome::Panicked) {
        finding = Some(keep_finding("panic", input));
    }
    fuzz_support::Ran {
        outcome,
        peak,
        elapsed,
        finding,
    }
}

/// Aborts the run (keeping the input) when a worker is stuck on one.
fn watchdog(running: &[Running], done: &std::sync::atomic::AtomicBool, started: Instant) {
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let now = started.elapsed().as_millis() as u64;
        for slot in running {
            let since = slot.since_ms.load(Ordering::SeqCst);
            if since > 0 && now.saturating_sub(since) > HANG.as_millis() as u64 {
                let input = slot.input.lock().unwrap().clone();
                let kept = keep_finding("hang", &input);
                eprintln!(
                    "fuzz: an input ran past {HANG:?}; kept as {}",
                    kept.display()
                );
                std::process::abort();
            }
        }
    }
}

#[test]
fn inputs_that_once_broke_a_bound_stay_within_it() {
    let regressions = files("regressions");
    for (path, bytes) in &regressions {
        // Every command, by turns.
        let ran = (0..4)
            .map(|turn| run_checked(bytes, turn))
            .max_by_key(|r| r.elapsed)
            .unwrap();
        assert!(ran.elapsed < HANG, "{}: {:?}", path.display(), ran.elapsed);
        assert!(
            ran.finding.is_none(),
            "{}: {} bytes of heap",
            path.display(),
            ran.peak
        );
        eprintln!(
            "{}: {:?} in {:?}, {} KiB",
            path.display(),
            ran.outcome,
            ran.elapsed,
            ran.peak >> 10
        );
    }
    assert!(!regressions.is_empty());
}

/// `TT_FUZZ_FROM=a.tt,b.tt cargo test --test fuzz -- --ignored make_corpus`:
/// cuts of real recordings (a few hundred events each, in several blocks)
/// for the corpus.
#[test]
#[ignore]
fn make_corpus() {
    let from = std::env::var("TT_FUZZ_FROM").expect("TT_FUZZ_FROM");
    for path in from.split(',') {
        fuzz_support::cut_recording(Path::new(path), &dir("corpus"));
    }
}
