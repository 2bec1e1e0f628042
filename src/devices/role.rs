//! What a paired device may do.

/// What a device may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything a client does: prompts, votes, rules, modes.
    Voter,
    /// Reads and subscribes; refused on every route that changes something.
    Observer,
    /// What the operator's token may do: only a person's sign-in has it, when the provider's
    /// claims map to it (`--oidc-role`); no pairing code grants it.
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Voter => "voter",
            Role::Observer => "observer",
            Role::Operator => "operator",
        }
    }

    /// A role a pairing code may grant (`voter`, `observer`).
    pub fn parse(s: &str) -> Option<Role> {
        [Role::Voter, Role::Observer].into_iter().find(|r| r.as_str() == s)
    }

    /// A role as the store keeps it: also `operator`, which a person's sign-in may have.
    pub fn parse_stored(s: &str) -> Option<Role> {
        Role::parse(s).or((s == "operator").then_some(Role::Operator))
    }
}
