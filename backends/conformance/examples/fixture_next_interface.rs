//! A test fixture: a plugin built for the *next* version (5) of the plugin interface, with a
//! root module of a different layout. This build speaks version 4 and must refuse it with
//! `LoadError::InterfaceVersion` before looking at any of its types. When the interface
//! version is bumped, this fixture's version moves to the one after it (the loading test
//! checks that it is `INTERFACE_VERSION + 1`).

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RStr;
use abi_stable::{declare_root_module_statics, export_root_module, StableAbi};

/// The root module as interface version 5 might define it.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = NextPluginRef)))]
#[sabi(missing_field(option))]
pub struct NextPlugin {
    pub name: RStr<'static>,
    pub plugin_version: RStr<'static>,
    /// A field version 4 does not have.
    pub streams: u32,
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn() -> u32,
}

impl std::fmt::Debug for NextPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextPlugin").finish_non_exhaustive()
    }
}

impl RootModule for NextPluginRef {
    declare_root_module_statics! {NextPluginRef}
    const BASE_NAME: &'static str = "quabla_plugin";
    const NAME: &'static str = "quabla backend plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("5.0.0");
}

extern "C" fn open() -> u32 {
    5
}

#[export_root_module]
pub fn root_module() -> NextPluginRef {
    NextPlugin {
        name: RStr::from_str("next"),
        plugin_version: RStr::from_str("5.0.0"),
        streams: 4,
        open,
    }
    .leak_into_prefix()
}
