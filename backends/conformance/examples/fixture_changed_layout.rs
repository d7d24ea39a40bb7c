//! A test fixture: a plugin that claims the current interface version but whose root
//! module has another layout, as if the interface had changed without a version bump. The
//! layout check at load must refuse it with `LoadError::Layout`.

use abi_stable::library::RootModule;
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::RStr;
use abi_stable::{declare_root_module_statics, export_root_module, StableAbi};

/// The root module with the name of the current version's but an `open` of another signature.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = QuablaPluginRef)))]
#[sabi(missing_field(option))]
pub struct QuablaPlugin {
    pub name: RStr<'static>,
    pub plugin_version: RStr<'static>,
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn(u64) -> u64,
}

impl std::fmt::Debug for QuablaPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuablaPlugin").finish_non_exhaustive()
    }
}

impl RootModule for QuablaPluginRef {
    declare_root_module_statics! {QuablaPluginRef}
    const BASE_NAME: &'static str = "quabla_plugin";
    const NAME: &'static str = "quabla backend plugin";
    const VERSION_STRINGS: VersionStrings =
        VersionStrings::new(quabla_backend::abi::INTERFACE_VERSION_STRING);
}

extern "C" fn open(x: u64) -> u64 {
    x
}

#[export_root_module]
pub fn root_module() -> QuablaPluginRef {
    QuablaPlugin {
        name: RStr::from_str("changed"),
        plugin_version: RStr::from_str(quabla_backend::abi::INTERFACE_VERSION_STRING),
        open,
    }
    .leak_into_prefix()
}
