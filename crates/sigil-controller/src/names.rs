//! Names the controller writes under, shared by the modules that write and
//! by the [`crate::context::Context`] that holds them. A leaf: it imports no
//! other module of the crate, so none of them has to import the context for
//! a constant.

/// Name under which the controller writes (field manager, event reporter).
pub const MANAGER: &str = "sigil-controller";

/// `source` of the built-in Sigstore root verified from its TUF mirror.
pub const TUF: &str = "tuf";
/// `source` of the built-in Sigstore root's copy built into sigil.
pub const EMBEDDED: &str = "embedded";

/// The TUF state key of a built-in Sigstore instance's repository, e.g.
/// `sigstore.public-good`.
pub fn sigstore_repository(instance: &str) -> String {
    format!("sigstore.{instance}")
}
