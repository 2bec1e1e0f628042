//! A workspace's rules (`docs/protocol.md#7-permission-rules`): rule objects like a session's,
//! applied to every session of the workspace after the session's own, persisted in the
//! [`Store`], and announced to the workspace's live sessions when they change.
//!
//! One [`WorkspaceRules`] per workspace, shared by the daemon's table and each session's mediator.
//! The list is copied on write (an `Arc<Vec<_>>` swapped under a short lock), so matching a request
//! holds no lock of this file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::rules::{self, CompiledRule, RuleError};
use crate::store::Store;
use crate::sync::lock;

/// Called after a change with the id of the session that made it (`""` for none): tells the
/// workspace's other live sessions (`policy_updated`, pending requests re-checked). The daemon
/// provides it; it must not block (it spawns).
pub type Announce = Box<dyn Fn(&Path, &str) + Send + Sync>;

pub struct WorkspaceRules {
    workspace: PathBuf,
    rules: Mutex<Arc<Vec<CompiledRule>>>,
    store: Arc<dyn Store>,
    announce: Announce,
}

impl std::fmt::Debug for WorkspaceRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceRules").field("workspace", &self.workspace).finish_non_exhaustive()
    }
}

impl WorkspaceRules {
    /// The rules of `workspace`, starting with `stored` (wire objects read back from the store;
    /// any that no longer validates is skipped with a warning).
    pub fn new(
        workspace: PathBuf,
        stored: &[Value],
        store: Arc<dyn Store>,
        announce: Announce,
    ) -> WorkspaceRules {
        let compiled: Vec<CompiledRule> = stored
            .iter()
            .filter_map(|r| {
                let c = rules::from_stored(r, &workspace);
                if c.is_none() {
                    tracing::warn!(workspace = %workspace.display(), "a stored workspace rule no longer validates; skipped");
                }
                c
            })
            .take(rules::MAX_RULES_PER_SESSION)
            .collect();
        WorkspaceRules { workspace, rules: Mutex::new(Arc::new(compiled)), store, announce }
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The rules now, oldest first.
    pub fn snapshot(&self) -> Arc<Vec<CompiledRule>> {
        lock(&self.rules).clone()
    }

    pub fn list(&self) -> Vec<Value> {
        self.snapshot().iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect()
    }

    /// Adds a rule (at most [`rules::MAX_RULES_PER_SESSION`] per workspace), records it, and
    /// announces it to every live session of the workspace but `from_session`. Returns its wire
    /// object.
    pub fn add(&self, rule: CompiledRule, from_session: &str) -> Result<Value, RuleError> {
        let wire = serde_json::to_value(&rule.rule).unwrap_or(Value::Null);
        {
            let mut rules = lock(&self.rules);
            if rules.len() >= rules::MAX_RULES_PER_SESSION {
                return Err(RuleError::Invalid(format!(
                    "at most {} rules per workspace",
                    rules::MAX_RULES_PER_SESSION
                )));
            }
            let mut next = Vec::with_capacity(rules.len() + 1);
            next.extend(rules.iter().cloned());
            next.push(rule.clone());
            *rules = Arc::new(next);
        }
        self.store.put_workspace_rule(&self.workspace.to_string_lossy(), &rule.rule.rule_id, &wire);
        (self.announce)(&self.workspace, from_session);
        Ok(wire)
    }

    pub fn remove(&self, rule_id: &str) -> Result<(), RuleError> {
        {
            let mut rules = lock(&self.rules);
            if !rules.iter().any(|r| r.rule.rule_id == rule_id) {
                return Err(RuleError::NotFound);
            }
            let next: Vec<CompiledRule> =
                rules.iter().filter(|r| r.rule.rule_id != rule_id).cloned().collect();
            *rules = Arc::new(next);
        }
        self.store.delete_workspace_rule(&self.workspace.to_string_lossy(), rule_id);
        (self.announce)(&self.workspace, "");
        Ok(())
    }
}
