//! Loading plugin files that must be refused, with the real libraries of the build: truncated
//! and bit-flipped copies of the CPU plugin (checked before the dynamic loader maps them, so
//! they are errors and never a crash), files that are not libraries, a layout mismatch reported
//! by its innermost cause, and names that disagree.

use proptest::prelude::*;
use quabla_backend::library_file::{check_library_bytes, check_library_file, FileProblem, Host};
use quabla_backend::registry::{
    plugin_file_name, LoadError, OpenError, Plugin, PluginSearch, Registry, Status,
};
use quabla_conformance::plugins::{build, install, scratch_dir};
use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn cpu_plugin() -> PathBuf {
    build().unwrap_or_else(|e| panic!("{e}")).cpu_plugin()
}

/// The bytes of the CPU plugin library, read once.
fn cpu_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(cpu_plugin()).unwrap())
}

/// The end of the last byte of any `PT_LOAD` segment of an ELF64 little-endian file, read
/// independently of the checker; `None` if the headers are not all there.
fn elf_load_end(b: &[u8]) -> Option<u64> {
    let u = |at: u64, w: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let s = b.get(at..at.checked_add(w)?)?;
        Some(s.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x)))
    };
    let (phoff, phentsize, phnum) = (u(32, 8)?, u(54, 2)?, u(56, 2)?);
    let mut end = 0;
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u(at, 4)? == 1 {
            end = end.max(u(at + 8, 8)?.checked_add(u(at + 32, 8)?)?);
        }
    }
    Some(end)
}

fn is_elf_host() -> bool {
    cfg!(all(
        target_os = "linux",
        target_pointer_width = "64",
        target_endian = "little"
    ))
}

#[test]
fn the_real_plugin_library_passes_the_check() {
    assert_eq!(check_library_file(&cpu_plugin()), Ok(()));
    assert_eq!(check_library_bytes(cpu_bytes(), &Host::current()), Ok(()));
}

#[test]
fn every_truncation_that_cuts_a_loadable_segment_is_refused_at_every_boundary() {
    let bytes = cpu_bytes();
    let host = Host::current();
    let mut cuts: Vec<usize> = vec![0, 1, 4, 16, 63, 64, 65, 200, 4096, bytes.len() - 1];
    if is_elf_host() {
        let end = elf_load_end(bytes).unwrap() as usize;
        assert!(end <= bytes.len());
        cuts.extend([end - 1, end / 2, end - 4096]);
    }
    for cut in cuts {
        let result = check_library_bytes(&bytes[..cut], &host);
        assert!(result.is_err(), "a cut at {cut} of {} passed", bytes.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any truncation that cuts a loadable segment is refused; on ELF hosts every truncation
    /// is, because the section headers are the file's last bytes.
    #[test]
    fn truncations_of_the_real_library_are_refused(fraction in 0.0f64..1.0) {
        let bytes = cpu_bytes();
        let cut = ((bytes.len() as f64) * fraction) as usize;
        let result = check_library_bytes(&bytes[..cut], &Host::current());
        if is_elf_host() {
            prop_assert!(result.is_err(), "cut at {}", cut);
        } else {
            let _ = result;
        }
    }

    /// Bit flips in the headers never make the check panic, and an accepted file still has
    /// its loadable segments inside it (read independently).
    #[test]
    fn bit_flips_of_the_real_library_never_panic(
        flips in proptest::collection::vec((0usize..8192, 0u8..8), 1..8),
        cut in proptest::option::of(0usize..usize::MAX),
    ) {
        // One copy of the (large) library, flipped and flipped back for each case.
        thread_local! {
            static COPY: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(cpu_bytes().to_vec());
        }
        let (result, end, len) = COPY.with(|copy| {
            let mut bytes = copy.borrow_mut();
            let flip = |bytes: &mut Vec<u8>| {
                for &(at, bit) in &flips {
                    let at = at % bytes.len();
                    bytes[at] ^= 1 << bit;
                }
            };
            flip(&mut bytes);
            let len = cut.map_or(bytes.len(), |c| c % (bytes.len() + 1));
            let view = &bytes[..len];
            let outcome = (check_library_bytes(view, &Host::current()), elf_load_end(view), len);
            flip(&mut bytes);
            outcome
        });
        if result.is_ok() && is_elf_host() {
            prop_assert!(end.is_some_and(|e| e <= len as u64), "{:?}", end);
        }
    }
}

#[test]
fn a_truncated_plugin_in_a_folder_is_listed_with_its_error_and_nothing_crashes() {
    let dir = scratch_dir("truncated-plugin");
    let bytes = cpu_bytes();
    let path = dir.join(plugin_file_name("cpu"));
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let entry = registry
        .entries()
        .into_iter()
        .find(|e| e.origin == quabla_backend::registry::Origin::Plugin(path.clone()))
        .unwrap();
    match entry.status {
        Status::LoadFailed(LoadError::Open {
            cause: OpenError::File(FileProblem::Truncated { .. }),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let reason = entry.info().reason.unwrap();
    assert!(
        reason.contains("cannot be opened as a dynamic library") && reason.contains("truncated"),
        "{reason}"
    );
    // The registry still works, and loading the file by path gives the same error.
    assert!(registry.backend("cpu").is_ok());
    assert!(matches!(
        registry.load_plugin(&path),
        Err(LoadError::Open {
            cause: OpenError::File(FileProblem::Truncated { .. }),
            ..
        })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_running_executable_and_other_non_libraries_are_refused() {
    let exe = std::env::current_exe().unwrap();
    let err = Plugin::load(&exe).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::Open {
                cause: OpenError::File(FileProblem::NotALibrary(_)),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        Plugin::load(Path::new("")),
        Err(LoadError::Open {
            cause: OpenError::File(FileProblem::EmptyPath),
            ..
        })
    ));
    let dir = scratch_dir("not-libraries");
    assert!(matches!(
        Plugin::load(&dir),
        Err(LoadError::Open {
            cause: OpenError::File(FileProblem::NotAFile("a directory")),
            ..
        })
    ));
    #[cfg(unix)]
    {
        // A FIFO: opening it for reading would block; it is refused before that.
        let fifo = dir.join(plugin_file_name("fifo"));
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(matches!(
                Plugin::load(&fifo),
                Err(LoadError::Open {
                    cause: OpenError::File(FileProblem::NotAFile("a FIFO")),
                    ..
                })
            ));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bare_file_name_loads_the_checked_file_not_one_from_the_loader_search_path() {
    // Relative to the working folder: the loader is given the canonical path.
    let dir = scratch_dir("relative-plugin");
    install(&cpu_plugin(), &dir, &plugin_file_name("cpu"));
    let previous = std::env::current_dir().unwrap();
    std::env::set_current_dir(&dir).unwrap();
    let loaded = Plugin::load(Path::new(&plugin_file_name("cpu")));
    std::env::set_current_dir(previous).unwrap();
    let plugin = loaded.unwrap();
    assert_eq!(plugin.name(), "cpu");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_layout_mismatch_names_its_innermost_cause_and_keeps_the_report() {
    let path = build().unwrap().fixture("fixture_changed_layout");
    let err = Plugin::load(&path).unwrap_err();
    let LoadError::Layout {
        mismatch, report, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    let message = err.to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains(mismatch.as_str()), "{message}");
    // The fixture declares its own `QuablaPlugin`, so the innermost difference is the
    // package of that type (a plugin built against a modified quabla-backend gets the type
    // and field inside it; see the unit tests of quabla-backend's `layout` module).
    assert_eq!(
        mismatch,
        "type QuablaPlugin differs: package quabla-backend here, quabla-conformance in the plugin"
    );
    assert!(message.len() < 600, "{message}");
    let source = err
        .source()
        .expect("the full report is the source")
        .to_string();
    assert_eq!(source, report.0);
    assert!(source.lines().count() > 20, "{source}");
}

#[test]
fn a_file_named_for_another_backend_is_refused() {
    let dir = scratch_dir("misnamed-plugin");
    let path = install(&cpu_plugin(), &dir, &plugin_file_name("notcpu"));
    let err = Plugin::load(&path).unwrap_err();
    assert_eq!(
        err,
        LoadError::NameMismatch {
            path: path.clone(),
            file_name: "notcpu".into(),
            declared: "cpu".into(),
        }
    );
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let row = registry
        .devices()
        .into_iter()
        .find(|d| d.name == "notcpu")
        .unwrap();
    assert!(!row.available);
    assert!(row.reason.unwrap().contains("rename it to"));
    std::fs::remove_dir_all(&dir).unwrap();
}
