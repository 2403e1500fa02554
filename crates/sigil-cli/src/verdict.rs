//! What a command comes to, and its exit status: shared by every command
//! module (and `main`), so none of them imports another for it.

/// The outcome of evaluating images, worst first when combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    /// Every image is admitted without warnings.
    Allow,
    /// Every image is admitted, some with warnings.
    Warn,
    /// Some image is denied.
    Deny,
    /// `sigil policy preview --fail-on-deny`: the previewed policies would
    /// deny something that runs.
    WouldDeny,
}

impl Verdict {
    /// The exit status: 0 allow, 3 warn, 1 deny, 4 would deny (clap uses 2
    /// for usage errors).
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Self::Allow => 0,
            Self::Warn => 3,
            Self::Deny => 1,
            Self::WouldDeny => 4,
        }
    }
}
