//! [`code_table!`]: the declarative form of every closed set of named kinds in the IR (op
//! kinds, elementwise functions, predicates, reductions, linear-algebra kinds, region forms).
//!
//! One row per kind gives its variant, its stable wire code and its text name; from that one
//! list the macro derives the enum, `ALL` (every kind, in declaration order), `name`, `code`,
//! `from_name` and `from_code`. Nothing about a kind is written twice, so a new kind is one new
//! row, after which the compiler lists every exhaustive `match` that needs a rule for it. Two
//! rows with the same code or name are an unreachable pattern in `from_code` / `from_name`,
//! which the workspace's `-D warnings` turns into a build error.

/// Declares a fieldless enum from rows `Variant = code => "name"`; see the module docs.
macro_rules! code_table {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $name:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $ty {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $ty {
            /// Every kind, in the order of the table.
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$variant),*];

            /// The text name.
            pub fn name(self) -> &'static str {
                match self {
                    $( $ty::$variant => $name, )*
                }
            }

            /// The stable code of the plan wire format.
            pub fn code(self) -> u8 {
                match self {
                    $( $ty::$variant => $code, )*
                }
            }

            /// The kind with this wire code.
            pub fn from_code(code: u8) -> Option<$ty> {
                match code {
                    $( $code => Some($ty::$variant), )*
                    _ => None,
                }
            }

            /// The kind with this text name.
            pub fn from_name(name: &str) -> Option<$ty> {
                match name {
                    $( $name => Some($ty::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use code_table;
