//! Who is calling, as every door describes it to the desk: one [`Caller`], whatever the wire.

use crate::devices::Device;
use crate::permission::Via;

use super::refusal::Refusal;

/// Who may call an operation (`docs/protocol.md#23-bearer-token`, `docs/operations.md#devices`):
/// the route table's access column, and what each ACP method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No credential: the web app's files, action links, the pairing exchange.
    Public,
    /// The operator and every paired device, observers included.
    Read,
    /// The operator and voter devices: observers get `403 read_only_device`.
    Write,
    /// The operator's token only: devices get `403 operator_required`.
    Operator,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Public => "public",
            Access::Read => "read",
            Access::Write => "write",
            Access::Operator => "operator",
        }
    }
}

/// The operator's token as a voter of a `require` rule ([`Caller::voter`]); no device id or client id
/// of a link looks like it (device ids are `dev-` and hex).
pub(super) const OPERATOR_VOTER: &str = "operator";

// A rule may name any group a person can be kept with, and none longer: it could never be met.
const _: () = assert!(crate::permission::rules::MAX_GROUP_CHARS == crate::devices::MAX_CLAIM_CHARS);

/// The credential behind a caller.
#[derive(Debug, Clone)]
pub enum Who {
    /// The daemon's token, or anyone on a daemon without one (loopback only): the trusted
    /// operator path, whose client ids are self-reported.
    Operator,
    /// A paired device: it acts as its own id, within its role.
    Device(Device),
    /// A notification's action link (its token is the credential): it acts as its target's
    /// client id, and only on its own request.
    Link,
}

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The operator: everything.
    Operator,
    /// A voter device or an action link: read, write, vote.
    Voter,
    /// An observer device: read and subscribe; never counted among the voters, never asked.
    Observer,
}

/// One caller of the desk, as its door resolved it.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client id it acts as, once known (a device's is its device id).
    pub client: Option<String>,
    /// The door minted `client` (the caller named none): it leaves its sessions with the
    /// connection, and may be forgotten first when a session's clients are full.
    pub minted: bool,
    pub who: Who,
    /// The peer is on this host's loopback (read from the socket, or vouched for by the daemon
    /// that relayed the request): what `local-only` decides on.
    pub local: bool,
    /// Which door it came through.
    pub via: Via,
}

impl Caller {
    /// The operator through `via`.
    pub fn operator(local: bool, via: Via) -> Caller {
        Caller { client: None, minted: false, who: Who::Operator, local, via }
    }

    /// The same caller acting as `client` (a device's credential already fixed its own).
    pub fn acting_as(mut self, client: Option<String>) -> Caller {
        if self.client.is_none() {
            self.client = client;
        }
        self
    }

    pub fn role(&self) -> Role {
        match &self.who {
            Who::Operator => Role::Operator,
            Who::Device(d) if d.role == crate::devices::Role::Observer => Role::Observer,
            // Only a person's sign-in is an operator device (`--oidc-role`).
            Who::Device(d) if d.role == crate::devices::Role::Operator => Role::Operator,
            Who::Device(_) | Who::Link => Role::Voter,
        }
    }

    /// The identity a `require` rule's quorum counts once (`docs/protocol.md#7-permission-rules`):
    /// a person (every device they signed in with or paired) is one voter, a paired device its own,
    /// an action link its target's client, and every holder of the operator's token one voter,
    /// [`OPERATOR_VOTER`], whatever client ids it reports (they are self-reported, so they cannot
    /// make a second person).
    pub fn voter(&self) -> std::sync::Arc<str> {
        match &self.who {
            Who::Device(d) => d.client_id(),
            Who::Link => self.client.as_deref().unwrap_or(OPERATOR_VOTER).into(),
            Who::Operator => OPERATOR_VOTER.into(),
        }
    }

    /// The groups a `require` rule naming one looks for among its approvers: a signed-in person's,
    /// as their provider's `groups` claim listed them at their last sign-in or renewal. None for a
    /// paired device without a person, an action link or the operator's token: no provider vouched
    /// for who holds them.
    pub fn groups(&self) -> &[String] {
        self.device().and_then(|d| d.person.as_deref()).map_or(&[], |p| &p.groups)
    }

    /// The name the audit, the transcript and the cards show for what it does: a person's name,
    /// else a paired device's; none for the operator's token and links (their client id is shown).
    pub fn shown_name(&self) -> Option<&str> {
        self.device().map(Device::shown_name)
    }

    pub fn device(&self) -> Option<&Device> {
        match &self.who {
            Who::Device(d) => Some(d),
            Who::Operator | Who::Link => None,
        }
    }

    /// Whether it may vote (and answer): anyone but an observer.
    pub fn may_vote(&self) -> bool {
        self.role() != Role::Observer
    }

    /// Whether it may do what `access` asks.
    pub fn may(&self, access: Access) -> Result<(), Refusal> {
        match (access, self.role()) {
            (Access::Operator, Role::Operator) | (Access::Public | Access::Read, _) => Ok(()),
            (Access::Operator, _) => Err(Refusal::OperatorRequired),
            (Access::Write, Role::Observer) => Err(Refusal::ReadOnlyDevice),
            (Access::Write, _) => Ok(()),
        }
    }

    /// Whether it may act as client id `claimed`: a device only as its own client id (its id, or
    /// its person's; none claimed is fine: it is filled in).
    pub fn may_claim(&self, claimed: Option<&str>) -> Result<(), Refusal> {
        match (self.device(), claimed) {
            (Some(d), Some(c)) if !c.is_empty() && c != &*d.client_id() => {
                Err(Refusal::ClientIdMismatch { device_id: d.client_id().to_string() })
            }
            _ => Ok(()),
        }
    }

    /// Whether a vote of this caller registers it first: an action link (its token is the
    /// credential, its target may never have attached) and an ACP client (`session/permission`
    /// names the session it votes on). A REST client must have registered (attached, subscribed
    /// or sent a heartbeat): its vote is refused `invalid_client_id` otherwise.
    pub fn joins_to_vote(&self) -> bool {
        matches!(self.who, Who::Link) || self.via == Via::Acp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_is_named_as_the_openapi_document_says_it() {
        let named: Vec<&str> = [Access::Public, Access::Read, Access::Write, Access::Operator]
            .iter()
            .map(|a| a.as_str())
            .collect();
        assert_eq!(named, ["public", "read", "write", "operator"]);
    }

    #[test]
    fn the_operator_may_do_anything_and_a_link_votes_and_joins_to_vote() {
        let op = Caller::operator(true, Via::Rest);
        for access in [Access::Public, Access::Read, Access::Write, Access::Operator] {
            assert!(op.may(access).is_ok(), "{access:?}");
        }
        assert_eq!((op.role(), op.may_vote(), op.joins_to_vote()), (Role::Operator, true, false));
        assert!(op.may_claim(Some("anyone")).is_ok(), "the operator's client ids are self-reported");
        let link = Caller { who: Who::Link, ..Caller::operator(false, Via::Link) };
        assert_eq!((link.role(), link.may_vote(), link.joins_to_vote()), (Role::Voter, true, true));
        assert!(matches!(link.may(Access::Operator), Err(Refusal::OperatorRequired)));
        assert!(link.may(Access::Write).is_ok());
        let acp = Caller::operator(true, Via::Acp);
        assert!(acp.joins_to_vote(), "session/permission names its session");
        let named =
            Caller::operator(true, Via::Rest).acting_as(Some("alice".into())).acting_as(Some("bob".into()));
        assert_eq!(named.client.as_deref(), Some("alice"), "a client id, once set, stays");
    }
}
