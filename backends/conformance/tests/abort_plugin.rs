//! A plugin built with `panic = "abort"` is refused at load, from what its root module records,
//! before any of its functions is called. The fixture's `open` panics: had the loader called
//! it, this test process would have aborted. (A test binary of its own, so that such an abort
//! could not take other tests down with it.)

use quabla_backend::registry::{plugin_file_name, LoadError, Plugin, PluginSearch, Registry};
use quabla_conformance::plugins::{build_aborting_fixture, install, scratch_dir};

#[test]
fn a_plugin_built_to_abort_on_panic_is_refused_before_it_is_called() {
    let path = build_aborting_fixture().unwrap_or_else(|e| panic!("{e}"));
    let err = Plugin::load(path).unwrap_err();
    assert_eq!(
        err,
        LoadError::AbortsOnPanic {
            path: path.to_path_buf()
        }
    );
    assert!(
        err.to_string().contains("built with panic = \"abort\""),
        "{err}"
    );

    // Found in a plugin folder, it is listed as unavailable with that error, and the other
    // sources still work.
    let dir = scratch_dir("aborting-plugin");
    install(path, &dir, &plugin_file_name("aborting"));
    let registry = Registry::discover(&PluginSearch::folders([dir.clone()]));
    let row = registry
        .devices()
        .into_iter()
        .find(|d| d.name == "aborting")
        .unwrap();
    assert!(!row.available);
    assert!(row.reason.unwrap().contains("panic = \"abort\""));
    assert!(registry.backend("aborting").is_err());
    assert!(matches!(
        registry.load_plugin(path),
        Err(LoadError::AbortsOnPanic { .. })
    ));
    assert!(registry.backend("cpu").is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}
