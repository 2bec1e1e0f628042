//! The names of the events a session's stream carries (`docs/protocol.md#5-event-stream`).
//!
//! A leaf, so that every floor that publishes (the session, the permission mediator) and every one
//! that will keep or forward events (a durable store, notifications) names them the same way
//! without importing the bus.

/// An event's `type` (and SSE `event:` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An agent `session/update`, its params passed through byte for byte.
    SessionUpdate,
    /// A prompt's turn ended with the agent's answer (exactly one turn event per prompt).
    TurnComplete,
    /// A prompt's turn failed or never ran.
    TurnError,
    ModelSwitched,
    UserShellCommand,
    UserShellResult,
    PermissionRequest,
    PermissionResolved,
    PermissionPartialVote,
    PermissionForbidden,
    PermissionAlreadyResolved,
    /// A reviewer's verdict that did not decide a pending request (not trusted with its kind,
    /// `escalate`, or a failure): shown beside it.
    PermissionReviewed,
    /// Reviewers denied enough of a turn (or a request of a critical kind) that the turn was
    /// stopped: the session's circuit breaker.
    ReviewBreaker,
    PolicyUpdated,
    /// A turn's change set: what it changed in the workspace, with stats, not hunks
    /// (`docs/protocol.md` § 18); just before its `turn_complete` or `turn_error`.
    TurnChanges,
    /// Files a turn changed that no approved permission request named.
    UnapprovedChange,
    /// A client rewound the session's files to before a turn.
    SessionRewound,
    /// The agent said a URL elicitation is done (`elicitation/complete`); names its request.
    ElicitationComplete,
    /// A process the daemon started (this session's agent, or something it ran) tried to act as
    /// a client of the daemon, and was refused (`crate::peer`).
    AgentRefusedAsClient,
    /// Terminal: the session was closed (by a client or the shutdown); always the last event.
    SessionClosed,
    /// Terminal: the agent process exited; always the last event.
    SessionDied,
    /// Id-less, stream-local: this stream fell behind and is closed.
    ClientEvicted,
    /// Id-less, stream-local: this stream lags 75% of what it may before it is evicted.
    SlowClientWarning,
    /// Id-less, stream-local: the requested resume point has left the replay ring.
    StateResyncRequired,
    /// Id-less, stream-local: the replay is over, live events follow.
    ReplayComplete,
    /// Id-less, in a replay from the history: events `fromId..=toId` were streamed but not
    /// recorded (the store could not keep up).
    HistoryGap,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SessionUpdate => "session_update",
            EventKind::TurnComplete => "turn_complete",
            EventKind::TurnError => "turn_error",
            EventKind::ModelSwitched => "model_switched",
            EventKind::UserShellCommand => "user_shell_command",
            EventKind::UserShellResult => "user_shell_result",
            EventKind::PermissionRequest => "permission_request",
            EventKind::PermissionResolved => "permission_resolved",
            EventKind::PermissionPartialVote => "permission_partial_vote",
            EventKind::PermissionForbidden => "permission_forbidden",
            EventKind::PermissionAlreadyResolved => "permission_already_resolved",
            EventKind::PermissionReviewed => "permission_reviewed",
            EventKind::ReviewBreaker => "review_breaker",
            EventKind::PolicyUpdated => "policy_updated",
            EventKind::TurnChanges => "turn_changes",
            EventKind::UnapprovedChange => "unapproved_change",
            EventKind::SessionRewound => "session_rewound",
            EventKind::ElicitationComplete => "elicitation_complete",
            EventKind::AgentRefusedAsClient => "agent_refused_as_client",
            EventKind::SessionClosed => "session_closed",
            EventKind::SessionDied => "session_died",
            EventKind::ClientEvicted => "client_evicted",
            EventKind::SlowClientWarning => "slow_client_warning",
            EventKind::StateResyncRequired => "state_resync_required",
            EventKind::ReplayComplete => "replay_complete",
            EventKind::HistoryGap => "history_gap",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
