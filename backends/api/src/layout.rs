//! Turns a failed layout check of `abi_stable` into one line that names what differs.
//!
//! `abi_stable`'s own report prints both layouts of every type on the way from the root module
//! down to the type that differs: hundreds of lines for a one-field change, with the cause far
//! down. This module owns finding the cause: the error deepest in the type tree, the fields
//! leading to it, and what differs there, said as "here" (this build, the loader) against "in
//! the plugin". It must not judge compatibility (`abi_stable` does) and keeps no state; the
//! full report stays available to the caller.

use abi_stable::abi_stability::abi_checking::{
    check_layout_compatibility, AbiInstability, AbiInstabilityError, AbiInstabilityErrors,
    ExpectedFound,
};
use abi_stable::type_layout::{TLFieldOrFunction, TypeLayout};
use std::fmt::Display;

/// The innermost difference between the layout a loader expects and the layout a library
/// exports, in one line. `abi_stable`'s loader reports a failed check only as text (its error
/// is formatted before it is returned), so the check is run again here, on the same two
/// layouts, to get the structured errors; `found` is `None` for a library that exports no
/// layout, and then only a pointer to the full report remains.
pub(crate) fn innermost_mismatch(
    expected: &'static TypeLayout,
    found: Option<&'static TypeLayout>,
) -> String {
    match found.map(|found| check_layout_compatibility(expected, found)) {
        Some(Err(errors)) => describe(&errors),
        _ => "abi_stable reports a difference it does not locate (see the full report)".into(),
    }
}

/// The deepest error of `errors` (the first of the deepest, when several are as deep): the
/// type it is about, the path of fields to it from the root module, and every difference.
pub(crate) fn describe(errors: &AbiInstabilityErrors) -> String {
    let deepest = errors
        .errors
        .iter()
        .enumerate()
        .max_by_key(|(i, e)| (e.stack_trace.len(), std::cmp::Reverse(*i)))
        .map(|(_, e)| e);
    let Some(error) = deepest else {
        return format!(
            "type {} differs (abi_stable reported no detail)",
            errors.interface.name()
        );
    };
    let (ty, path) = location(errors, error);
    let mut differences: Vec<String> = error.errs.iter().map(difference).collect();
    // Which fields differ, where the errors say only that the count or size does.
    let fields_differ = error.errs.iter().any(|e| {
        matches!(
            e,
            AbiInstability::Size(_) | AbiInstability::FieldCountMismatch(_)
        )
    });
    if fields_differ {
        differences.extend(field_sets(errors, error));
    }
    let differences = if differences.is_empty() {
        "abi_stable reported no detail".to_string()
    } else {
        differences.join("; ")
    };
    if path == ty {
        format!("type {ty} differs: {differences}")
    } else {
        format!("type {ty} (at {path}) differs: {differences}")
    }
}

/// The type an error is about and the field path to it (`QuablaPlugin.open().return`).
fn location(errors: &AbiInstabilityErrors, error: &AbiInstabilityError) -> (String, String) {
    let mut path = vec![errors.interface.name().to_string()];
    let mut ty = errors.interface.name().to_string();
    let mut steps = error.stack_trace.iter().peekable();
    // A root module is reached through `PrefixRef<'a, T>`, whose only field is `0`: the path
    // starts at `T`.
    if ty == "PrefixRef" {
        if let Some(ExpectedFound {
            expected: TLFieldOrFunction::Field(field),
            ..
        }) = steps.peek()
        {
            ty = field.layout().name().to_string();
            path = vec![ty.clone()];
            steps.next();
        }
    }
    for step in steps {
        match &step.expected {
            TLFieldOrFunction::Field(field) => {
                // abi_stable names a function's result `__returns`.
                let name = match field.name() {
                    "__returns" => "return",
                    other => other,
                };
                path.push(name.to_string());
                ty = field.layout().full_type().to_string();
            }
            // A function-pointer field is followed by its function, of the same name: one
            // step, `open()`.
            TLFieldOrFunction::Function(function) => {
                let name = function.name.as_str();
                match path.last_mut() {
                    Some(last) if last.as_str() == name => last.push_str("()"),
                    _ => path.push(format!("{name}()")),
                }
            }
        }
    }
    (ty, path.join("."))
}

/// The fields only one side of the innermost type has (`field streams only in the plugin`):
/// what a count or size mismatch does not say. `None` when both have the same field names.
fn field_sets(errors: &AbiInstabilityErrors, error: &AbiInstabilityError) -> Option<String> {
    let (expected, found) = match error.stack_trace.last() {
        Some(ExpectedFound {
            expected: TLFieldOrFunction::Field(e),
            found: TLFieldOrFunction::Field(f),
        }) => (e.layout(), f.layout()),
        Some(_) => return None,
        None => (errors.interface, errors.implementation),
    };
    let names = |layout: &'static TypeLayout| -> Vec<&'static str> {
        layout
            .get_fields()
            .map(|fields| fields.iter().map(|f| f.name()).collect())
            .unwrap_or_default()
    };
    let (here, there) = (names(expected), names(found));
    let only = |a: &[&str], b: &[&str]| -> Vec<String> {
        a.iter()
            .filter(|n| !b.contains(n))
            .map(|n| n.to_string())
            .collect()
    };
    let (only_here, only_there) = (only(&here, &there), only(&there, &here));
    let mut parts = Vec::new();
    if !only_there.is_empty() {
        parts.push(format!(
            "field{} {} only in the plugin",
            if only_there.len() == 1 { "" } else { "s" },
            only_there.join(", ")
        ));
    }
    if !only_here.is_empty() {
        parts.push(format!(
            "field{} {} only here",
            if only_here.len() == 1 { "" } else { "s" },
            only_here.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn pair<T: Display>(what: &str, ef: &ExpectedFound<T>) -> String {
    format!("{what} {} here, {} in the plugin", ef.expected, ef.found)
}

fn pair_debug<T: std::fmt::Debug>(what: &str, ef: &ExpectedFound<T>) -> String {
    format!(
        "{what} {:?} here, {:?} in the plugin",
        ef.expected, ef.found
    )
}

/// One difference, in words.
fn difference(e: &AbiInstability) -> String {
    match e {
        AbiInstability::Size(ef) => pair("size", ef),
        AbiInstability::Alignment(ef) => pair("alignment", ef),
        AbiInstability::FieldCountMismatch(ef) => {
            format!("{} fields here, {} in the plugin", ef.expected, ef.found)
        }
        AbiInstability::UnexpectedField(ef) => format!(
            "field `{}: {}` here, `{}: {}` in the plugin",
            ef.expected.name(),
            ef.expected.full_type(),
            ef.found.name(),
            ef.found.full_type()
        ),
        AbiInstability::Name(ef) => pair("type", ef),
        AbiInstability::NonZeroness(ef) => pair("non-zero", ef),
        AbiInstability::Package(ef) => pair("package", ef),
        AbiInstability::PackageVersion(ef) => pair("package version", ef),
        AbiInstability::MismatchedPrefixSize(ef) => {
            format!(
                "a prefix of {} fields here, {} in the plugin",
                ef.expected, ef.found
            )
        }
        AbiInstability::GenericParamCount(ef) => pair("generic parameters", ef),
        AbiInstability::TLDataDiscriminant(ef) => pair_debug("kind", ef),
        AbiInstability::MismatchedPrimitive(ef) => pair_debug("primitive", ef),
        AbiInstability::TooManyVariants(ef) => {
            format!("{} variants here, {} in the plugin", ef.expected, ef.found)
        }
        AbiInstability::UnexpectedVariant(ef) => pair("variant", ef),
        AbiInstability::EnumDiscriminant(ef) => pair_debug("discriminant", ef),
        AbiInstability::ReprAttr(ef) => pair_debug("representation", ef),
        AbiInstability::MismatchedExhaustiveness(ef) => pair_debug("exhaustiveness", ef),
        AbiInstability::MismatchedPrefixConditionality(_) => {
            "prefix fields differ in whether they are conditional".into()
        }
        AbiInstability::FieldLifetimeMismatch(ef) => {
            format!("field `{}` references other lifetimes", ef.expected.name())
        }
        AbiInstability::FnLifetimeMismatch(ef) => format!(
            "function pointer `{}` references other lifetimes",
            ef.expected.name.as_str()
        ),
        AbiInstability::FnQualifierMismatch(ef) => format!(
            "function pointer `{}` has other qualifiers (`unsafe`, ...)",
            ef.expected.name.as_str()
        ),
        AbiInstability::PackageVersionParseError(e) => format!("unreadable package version: {e}"),
        AbiInstability::MismatchedConstParam(_) => "const parameters differ".into(),
        AbiInstability::ReentrantLayoutCheckingCall => "the layout check was re-entered".into(),
        AbiInstability::CyclicTypeChecking { .. } => "a cyclic type check".into(),
        AbiInstability::IncompatibleWithNonExhaustive(e) => e.to_string(),
        AbiInstability::NoneExtraChecks => "extra checks here, none in the plugin".into(),
        AbiInstability::ExtraCheckError(_) => "an extra check of the type failed".into(),
        AbiInstability::TagError { err } => format!("type tags differ: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::StableAbi;

    /// A root module reaching a capabilities struct through a function pointer, as in this
    /// build...
    mod here {
        #[repr(C)]
        #[derive(abi_stable::StableAbi)]
        pub struct AbiCapabilities {
            pub float64: bool,
            pub device_count: u64,
        }

        #[repr(C)]
        #[derive(abi_stable::StableAbi)]
        pub struct Root {
            pub name: u32,
            pub capabilities: extern "C" fn() -> AbiCapabilities,
        }
    }

    /// ... and in a plugin built against an interface whose capabilities gained a field.
    mod plugin {
        #[repr(C)]
        #[derive(abi_stable::StableAbi)]
        pub struct AbiCapabilities {
            pub float64: bool,
            pub device_count: u64,
            pub streams: u64,
        }

        #[repr(C)]
        #[derive(abi_stable::StableAbi)]
        pub struct Root {
            pub name: u32,
            pub capabilities: extern "C" fn() -> AbiCapabilities,
        }
    }

    #[test]
    fn names_the_innermost_type_the_path_and_what_differs() {
        let errors = check_layout_compatibility(
            <here::Root as StableAbi>::LAYOUT,
            <plugin::Root as StableAbi>::LAYOUT,
        )
        .unwrap_err();
        let text = describe(&errors);
        assert!(
            text.starts_with("type AbiCapabilities (at Root.capabilities().return) differs: "),
            "{text}"
        );
        assert!(text.contains("size 16 here, 24 in the plugin"), "{text}");
        assert!(text.contains("field streams only in the plugin"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        // What it replaces: abi_stable's report, many lines long.
        assert!(errors.to_string().lines().count() > 40);
        // What the loader calls, with the two layouts.
        assert_eq!(
            innermost_mismatch(
                <here::Root as StableAbi>::LAYOUT,
                Some(<plugin::Root as StableAbi>::LAYOUT)
            ),
            text
        );
        assert!(innermost_mismatch(<here::Root as StableAbi>::LAYOUT, None).contains("full report"));
    }
}
