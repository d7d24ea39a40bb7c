//! `quabla-conformance [--plugin-dir DIR]...`: runs every conformance case on every backend of
//! this host (the linked ones and the plugins found in the given folders, then in the folders
//! of `QUABLA_PLUGIN_PATH`), prints the test × backend matrix, and exits with status 1 if any
//! case fails.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--plugin-dir" => match args.next() {
                Some(dir) => folders.push(PathBuf::from(dir)),
                None => {
                    eprintln!("quabla-conformance: --plugin-dir needs a folder");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!(
                    "usage: quabla-conformance [--plugin-dir DIR]...\n\
                     Plugins are also looked for in the folders of QUABLA_PLUGIN_PATH."
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("quabla-conformance: unknown argument `{other}`");
                return ExitCode::from(2);
            }
        }
    }
    // The folders of QUABLA_PLUGIN_PATH come after the named ones; a folder given both ways
    // is searched once.
    folders.extend(
        quabla_backend::registry::PluginSearch::from_env()
            .folder_list()
            .iter()
            .cloned(),
    );
    let matrix = quabla_conformance::run_matrix(quabla_conformance::columns(&folders));
    println!("{matrix}");
    if matrix.failures() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
