//! A test fixture: a plugin built for the *previous* version (3) of the plugin interface, whose
//! tensors could not hold integers. This build speaks version 4 and must refuse it
//! with `LoadError::InterfaceVersion` before looking at any of its types (the version is the
//! root module's major version, which `abi_stable` compares first). When the interface version
//! is bumped, this fixture's version moves to the one before it (the loading test checks that
//! it is `INTERFACE_VERSION - 1`).

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RStr;
use abi_stable::{declare_root_module_statics, export_root_module, StableAbi};

/// The root module with the fields of version 3 (its `open` stands for the old one).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PreviousPluginRef)))]
#[sabi(missing_field(option))]
pub struct PreviousPlugin {
    pub name: RStr<'static>,
    pub plugin_version: RStr<'static>,
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn() -> u32,
    pub unwinds_on_panic: bool,
}

impl std::fmt::Debug for PreviousPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreviousPlugin").finish_non_exhaustive()
    }
}

impl RootModule for PreviousPluginRef {
    declare_root_module_statics! {PreviousPluginRef}
    const BASE_NAME: &'static str = "quabla_plugin";
    const NAME: &'static str = "quabla backend plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("3.0.0");
}

extern "C" fn open() -> u32 {
    3
}

#[export_root_module]
pub fn root_module() -> PreviousPluginRef {
    PreviousPlugin {
        name: RStr::from_str("previous"),
        plugin_version: RStr::from_str("3.0.0"),
        open,
        unwinds_on_panic: true,
    }
    .leak_into_prefix()
}
