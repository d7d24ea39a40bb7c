use super::*;

#[test]
fn plugin_file_names_round_trip() {
    for name in ["cpu", "cuda", "mlx", "my_dev"] {
        assert_eq!(plugin_name_of_file(&plugin_file_name(name)), Some(name));
    }
    assert_eq!(plugin_name_of_file("libquabla_cpu.rlib"), None);
    assert_eq!(
        plugin_name_of_file(&format!("{DLL_PREFIX}quabla__plugin{DLL_SUFFIX}")),
        None
    );
    assert_eq!(
        plugin_name_of_file(&format!("{DLL_PREFIX}serde_derive{DLL_SUFFIX}")),
        None
    );
}

#[test]
fn search_lists_only_plugin_files_of_the_named_folders() {
    let root = std::env::temp_dir().join(format!("quabla-search-{}", std::process::id()));
    let inner = root.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(root.join(plugin_file_name("b")), b"x").unwrap();
    std::fs::write(root.join(plugin_file_name("a")), b"x").unwrap();
    std::fs::write(root.join("notes.txt"), b"x").unwrap();
    std::fs::write(inner.join(plugin_file_name("c")), b"x").unwrap();
    let search = PluginSearch::folders([root.clone(), root.join("missing"), root.clone()]);
    assert_eq!(search.folder_list().len(), 2);
    assert_eq!(
        search.candidates(),
        vec![
            root.join(plugin_file_name("a")),
            root.join(plugin_file_name("b"))
        ]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_bogus_library_is_a_load_error_not_a_crash() {
    let root = std::env::temp_dir().join(format!("quabla-bogus-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let path = root.join(plugin_file_name("bogus"));
    std::fs::write(&path, b"this is not a library").unwrap();
    let err = Plugin::load(&path).unwrap_err();
    assert!(matches!(err, LoadError::Open { .. }), "{err:?}");
    assert_eq!(err.path(), path);
    let registry = Registry::discover(&PluginSearch::folders([root.clone()]));
    let row = registry
        .devices()
        .into_iter()
        .find(|d| d.name == "bogus")
        .unwrap();
    assert_eq!(row.origin, Origin::Plugin(path.clone()));
    assert!(!row.available);
    assert!(row.reason.unwrap().contains("cannot be opened"));
    match registry.backend("bogus") {
        Err(ResolveError::NotFound { plugins, .. }) => assert_eq!(plugins.len(), 1),
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn known_backends_without_a_source_are_listed_as_not_found() {
    let registry = Registry::discover(&PluginSearch::none());
    let rows = registry.devices();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["cpu", "cuda", "mlx"]);
    assert!(rows
        .iter()
        .all(|r| r.origin == Origin::NotFound && !r.available));
    let err = registry.backend("mlx").unwrap_err();
    assert_eq!(err.to_string(), "mlx target is unavailable in this build");
}

#[test]
fn backend_names_are_checked() {
    for good in ["cpu", "cuda", "toy", "my_dev", "dev-2", "a"] {
        assert!(is_valid_backend_name(good), "{good}");
    }
    for bad in [
        "",
        "Cpu",
        "2dev",
        "cuda:0",
        "my dev",
        "dev/x",
        "é",
        &"x".repeat(65),
    ] {
        assert!(!is_valid_backend_name(bad), "{bad}");
    }
}

#[test]
fn the_search_is_the_plugin_path_only() {
    // Whatever QUABLA_PLUGIN_PATH holds, the executable's folder is not added to it.
    let exe_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let from_var: Vec<PathBuf> = std::env::var_os(PLUGIN_PATH_VAR)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    if !from_var.contains(&exe_dir) {
        assert!(!PluginSearch::from_env().folder_list().contains(&exe_dir));
    }
}

#[test]
fn a_folder_named_twice_under_two_spellings_is_searched_once() {
    let root = std::env::temp_dir().join(format!("quabla-spell-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let search = PluginSearch::folders([root.clone(), root.join("sub").join("..")]);
    assert_eq!(search.folder_list(), std::slice::from_ref(&root));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_empty_path_or_a_folder_is_a_typed_load_error() {
    let registry = Registry::discover(&PluginSearch::none());
    for (path, problem) in [
        (Path::new(""), FileProblem::EmptyPath),
        (
            std::env::temp_dir().as_path(),
            FileProblem::NotAFile("a directory"),
        ),
    ] {
        let err = Plugin::load(path).unwrap_err();
        assert_eq!(
            err,
            LoadError::Open {
                path: path.to_path_buf(),
                cause: OpenError::File(problem.clone())
            }
        );
        assert_eq!(registry.load_plugin(path).unwrap_err(), err);
    }
    assert_eq!(
        Plugin::load(Path::new("")).unwrap_err().to_string(),
        ": cannot be opened as a dynamic library: the path is empty"
    );
    // A failed explicit load registers nothing.
    assert_eq!(registry.entries().len(), linked_backends().count());
}

extern "C" fn open_nothing() -> RResult<BackendBox, PluginError> {
    RResult::RErr(PluginError::Unavailable {
        library: abi_stable::std_types::ROption::RNone,
        reason: "never opened in these tests".into(),
    })
}

#[test]
fn root_modules_are_checked_for_their_name_and_panic_strategy() {
    use crate::abi::plugin_module_with_strategy;
    let path = Path::new("/plugins").join(plugin_file_name("toy"));
    let ok = plugin_module_with_strategy("toy", "1", open_nothing, true);
    assert_eq!(check_module(&path, ok), Ok(()));
    // A file that is not named like a plugin may declare any valid name.
    assert_eq!(check_module(Path::new("/plugins/libtoy.so"), ok), Ok(()));

    let aborting = plugin_module_with_strategy("toy", "1", open_nothing, false);
    let err = check_module(&path, aborting).unwrap_err();
    assert_eq!(err, LoadError::AbortsOnPanic { path: path.clone() });
    assert!(
        err.to_string().contains("built with panic = \"abort\""),
        "{err}"
    );

    let other = plugin_module_with_strategy("other", "1", open_nothing, true);
    let err = check_module(&path, other).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the file is named for backend \"toy\" but the plugin declares \"other\"; \
             rename it to {}",
            path.display(),
            plugin_file_name("other")
        )
    );

    let bad = plugin_module_with_strategy("cuda:1", "1", open_nothing, true);
    assert!(matches!(
        check_module(Path::new("/plugins/libx.so"), bad),
        Err(LoadError::InvalidName { ref name, .. }) if name == "cuda:1"
    ));
    // The module records this crate's strategy where nothing overrides it.
    let recorded = crate::abi::plugin_module("toy", "1", open_nothing);
    assert_eq!(recorded.unwinds_on_panic(), Some(cfg!(panic = "unwind")));
}

#[test]
fn the_advice_names_the_file_the_folders_and_the_variable() {
    let registry = Registry::discover(&PluginSearch::none());
    assert_eq!(
        registry.availability_advice("toy"),
        format!(
            "install the plugin library {} in a folder of QUABLA_PLUGIN_PATH \
             (QUABLA_PLUGIN_PATH names no folder now), which is read when the program \
             first uses a device, or load it by path with load_plugin",
            plugin_file_name("toy")
        )
    );
    let folders = [PathBuf::from("/opt/a"), PathBuf::from("/opt/b")];
    let registry = Registry::discover(&PluginSearch::folders(folders));
    assert!(registry
        .availability_advice("toy")
        .contains("(searched: /opt/a, /opt/b)"));
}

#[test]
fn linked_names_resolve_and_unknown_ones_do_not() {
    let registry = Registry::discover(&PluginSearch::none());
    assert!(matches!(
        registry.backend("toy"),
        Err(ResolveError::NotFound { ref plugins, .. }) if plugins.is_empty()
    ));
}
