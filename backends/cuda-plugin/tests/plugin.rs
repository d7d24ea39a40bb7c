//! The CUDA plugin on a host without a GPU: the library loads, the backend is listed as
//! unavailable with the reason ("no CUDA driver" when the driver library is absent), and no
//! entry point panics — through the plugin ABI, in process, and as a linked backend. On a host
//! with a driver the same tests check that opening either succeeds or says why not.

use quabla_backend::registry::{plugin_file_name, Plugin, PluginSearch, Registry, ResolveError};
use quabla_cuda::discovery::{self, Library, Search};
use std::panic::catch_unwind;
use std::path::PathBuf;

/// Whether this host has a CUDA driver library at all.
fn driver_present() -> bool {
    discovery::open(Library::Driver, &Search::from_env()).is_ok()
}

/// The plugin library built with this test (the package's `cdylib`).
fn plugin_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    profile.join(plugin_file_name("cuda"))
}

#[test]
fn the_plugin_library_loads_and_lists_cuda_as_unavailable_with_the_reason() {
    let library = plugin_library();
    assert!(library.is_file(), "{} was not built", library.display());
    let dir = std::env::temp_dir().join(format!("quabla-cuda-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&library, dir.join(plugin_file_name("cuda"))).unwrap();
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let row = registry
        .devices()
        .into_iter()
        .find(|d| d.name == "cuda" && d.origin != quabla_backend::registry::Origin::Linked)
        .expect("the plugin's row");
    if driver_present() {
        assert!(row.available || row.reason.is_some(), "{row:?}");
    } else {
        assert!(!row.available, "{row:?}");
        let reason = row.reason.unwrap_or_default();
        assert!(reason.contains("no CUDA driver"), "{reason}");
        assert!(reason.contains("libcuda"), "{reason}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn opening_in_process_is_a_typed_error_without_a_driver() {
    let opened =
        catch_unwind(|| Plugin::in_process(quabla_cuda_plugin::quabla_plugin_root_module()).open())
            .expect("opening the plugin never panics");
    match opened {
        Ok(backend) => assert!(driver_present(), "opened {backend:?} without a driver"),
        Err(why) => {
            if !driver_present() {
                assert_eq!(why.library.as_deref(), Some("libcuda"), "{why}");
                assert!(why.reason.contains("no CUDA driver"), "{why}");
            }
        }
    }
}

#[test]
fn the_linked_backend_resolves_to_the_unavailable_reason() {
    match Registry::discover(&PluginSearch::none()).backend("cuda") {
        Ok(_) => assert!(driver_present()),
        Err(ResolveError::Unavailable { reason, .. }) => {
            if !driver_present() {
                assert!(reason.to_string().contains("no CUDA driver"), "{reason}");
            }
        }
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn every_entry_point_returns_a_typed_error_rather_than_panicking() {
    if driver_present() {
        return;
    }
    let probe = catch_unwind(quabla_cuda::probe).expect("probe never panics");
    assert!(probe.unwrap_err().reason.contains("no CUDA driver"));
    let open = catch_unwind(quabla_cuda::CudaBackend::open).expect("open never panics");
    assert!(open.is_err());
    let device =
        catch_unwind(|| quabla_cuda::runtime::Device::open(0)).expect("Device::open never panics");
    assert!(device.unwrap_err().to_string().contains("libcuda"));
    let device =
        catch_unwind(|| quabla_cuda::runtime::Device::open(3)).expect("Device::open never panics");
    assert!(device.is_err());
    // NVRTC alone needs no driver: it opens (from the environment's search) or says what was
    // searched.
    let nvrtc =
        catch_unwind(quabla_cuda::nvrtc::Nvrtc::open_default).expect("NVRTC's open never panics");
    if let Err(why) = nvrtc {
        assert_eq!(why.library.as_deref(), Some("libnvrtc"), "{why}");
        assert!(why.reason.contains("searched"), "{why}");
    }
}
