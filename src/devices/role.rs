//! What a paired device may do.

/// What a device may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything a client does: prompts, votes, rules, modes.
    Voter,
    /// Reads and subscribes; refused on every route that changes something.
    Observer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Voter => "voter",
            Role::Observer => "observer",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        [Role::Voter, Role::Observer].into_iter().find(|r| r.as_str() == s)
    }
}
