//! The Agent Client Protocol as the daemon speaks it: JSON-RPC 2.0 frames on the agent's stdio
//! (`jsonrpc`), the method names and error codes (below), and the two roles as traits
//! ([`Agent`]: what a session asks of its agent; [`Client`]: what the agent asks of a session).
//!
//! The lowest floor but the leaves: it knows no daemon type. The agent floor implements [`Agent`]
//! and calls [`Client`]; the daemon's sessions implement [`Client`] and call [`Agent`]. Payloads stay
//! raw JSON (`RawValue`) wherever the daemon only forwards them.

mod client;
mod jsonrpc;

pub use client::{Agent, CallError, Client};
pub use jsonrpc::{
    Frame, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RequestId, RpcError, Update,
    notification_line, params_value, request_line, response_line,
};

/// The ACP protocol version the daemon speaks (`initialize.protocolVersion`).
pub const PROTOCOL_VERSION: u64 = 1;

/// ACP method names, one constant each, so a typo is a compile error and every use is findable.
pub mod method {
    /// Daemon → agent, once per agent process.
    pub const INITIALIZE: &str = "initialize";
    /// Daemon → agent: open a session in a workspace.
    pub const SESSION_NEW: &str = "session/new";
    /// Daemon → agent: reopen a session the agent had before (it replays the conversation as
    /// `session/update`s, then answers); offered when `initialize` says `loadSession: true`.
    pub const SESSION_LOAD: &str = "session/load";
    /// Daemon → agent: run one turn.
    pub const SESSION_PROMPT: &str = "session/prompt";
    /// Daemon → agent (notification): stop the running turn.
    pub const SESSION_CANCEL: &str = "session/cancel";
    /// Daemon → agent: switch the session's model.
    pub const SESSION_SET_MODEL: &str = "session/set_model";
    /// Daemon → agent: switch the session's mode (the demo agent answers it).
    pub const SESSION_SET_MODE: &str = "session/set_mode";
    /// Daemon → agent: set one of the config options the agent announced at `session/new`.
    pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    /// Agent → daemon (notification): streamed output, tool calls, plans.
    pub const SESSION_UPDATE: &str = "session/update";
    /// Agent → daemon: may this tool call run?
    pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
    /// Agent → daemon: ask a person something (a form of primitive fields, or a URL to open);
    /// offered at `initialize` (`clientCapabilities.elicitation`).
    pub const ELICITATION_CREATE: &str = "elicitation/create";
    /// Agent → daemon (notification): a URL elicitation is done. Daemon → ACP client too, naming
    /// the elicitation by the id the client was given.
    pub const ELICITATION_COMPLETE: &str = "elicitation/complete";
    /// Agent → daemon: read a text file in the workspace.
    pub const FS_READ_TEXT_FILE: &str = "fs/read_text_file";
    /// Agent → daemon: write a text file in the workspace.
    pub const FS_WRITE_TEXT_FILE: &str = "fs/write_text_file";
}
