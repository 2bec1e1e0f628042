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
use tokio::sync::oneshot;

use super::rules::{self, CompiledRule, RuleError};
use crate::store::{Store, WriteError};
use crate::sync::lock;

/// Called after a change with the id of the session that made it (`""` for none): tells the
/// workspace's other live sessions (`policy_updated`, pending requests re-checked). The daemon
/// provides it; it must not block (it spawns).
pub type Announce = Box<dyn Fn(&Path, &str) + Send + Sync>;

pub struct WorkspaceRules {
    workspace: PathBuf,
    rules: Mutex<Rules>,
    store: Arc<dyn Store>,
    announce: Announce,
}

/// The list and the adds under way. Await-free critical sections only.
struct Rules {
    /// Copied on write: matching holds a snapshot, no lock.
    list: Arc<Vec<CompiledRule>>,
    /// Adds whose rule is being written: each holds a place under the cap.
    adding: usize,
    /// This daemon's own changes applied so far (adds and removes): a read of the store begun
    /// before one may not hold it ([`WorkspaceRules::replace`]).
    changes: u64,
}

/// A remembered decision's rule on its way to the disk (`WorkspaceRules::remember`): resolves
/// once it is on disk and applies, or with why it is not (then it applies nowhere).
#[derive(Debug)]
pub struct Remembered(oneshot::Receiver<Result<(), RuleError>>);

impl Remembered {
    pub async fn outcome(self) -> Result<(), RuleError> {
        self.0
            .await
            .unwrap_or_else(|_| Err(RuleError::Store(WriteError("the rule's write was dropped".into()))))
    }
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
        let rules = Rules { list: Arc::new(compiled), adding: 0, changes: 0 };
        WorkspaceRules { workspace, rules: Mutex::new(rules), store, announce }
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The rules now, oldest first.
    pub fn snapshot(&self) -> Arc<Vec<CompiledRule>> {
        lock(&self.rules).list.clone()
    }

    pub fn list(&self) -> Vec<Value> {
        self.snapshot().iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect()
    }

    /// Adds a rule (at most [`rules::MAX_RULES_PER_SESSION`] per workspace) once it is on disk,
    /// and announces it to every live session of the workspace but `from_session`. Returns its
    /// wire object; when the store refuses it, the rule applies nowhere.
    pub async fn add(&self, rule: CompiledRule, from_session: &str) -> Result<Value, RuleError> {
        let written = self.write(&rule)?.await;
        self.apply(rule, written, from_session)
    }

    /// A decision remembered for the workspace, from the mediator's vote (which cannot wait): the
    /// rule is written now and applies, announced to every live session of the workspace
    /// (`from_session`'s too), once it is on disk. The voter's answer waits on the returned
    /// [`Remembered`].
    pub fn remember(self: &Arc<Self>, rule: CompiledRule) -> Remembered {
        let (tx, rx) = oneshot::channel();
        match self.write(&rule) {
            Err(e) => {
                let _ = tx.send(Err(e));
            }
            Ok(ack) => {
                let rules = self.clone();
                tokio::spawn(async move {
                    let written = ack.await;
                    let _ = tx.send(rules.apply(rule, written, "").map(drop));
                });
            }
        }
        Remembered(rx)
    }

    /// Holds a place for `rule` under the cap and hands it to the store.
    fn write(&self, rule: &CompiledRule) -> Result<crate::store::Ack, RuleError> {
        let mut rules = lock(&self.rules);
        if rules.list.len() + rules.adding >= rules::MAX_RULES_PER_SESSION {
            return Err(RuleError::Invalid(format!(
                "at most {} rules per workspace",
                rules::MAX_RULES_PER_SESSION
            )));
        }
        rules.adding += 1;
        let wire = serde_json::to_value(&rule.rule).unwrap_or(Value::Null);
        Ok(self.store.put_workspace_rule(&self.workspace.to_string_lossy(), &rule.rule.rule_id, &wire))
    }

    /// The store answered `written` for `rule`: it applies (and is announced) only when on disk.
    fn apply(
        &self,
        rule: CompiledRule,
        written: Result<(), WriteError>,
        from_session: &str,
    ) -> Result<Value, RuleError> {
        let wire = serde_json::to_value(&rule.rule).unwrap_or(Value::Null);
        {
            let mut rules = lock(&self.rules);
            rules.adding -= 1;
            written.map_err(RuleError::Store)?;
            let mut next = Vec::with_capacity(rules.list.len() + 1);
            next.extend(rules.list.iter().cloned());
            next.push(rule);
            rules.list = Arc::new(next);
            rules.changes += 1;
        }
        (self.announce)(&self.workspace, from_session);
        Ok(wire)
    }

    /// This daemon's own changes applied so far: taken before a read of the store, handed back to
    /// [`WorkspaceRules::replace`] with what it read.
    pub fn changes(&self) -> u64 {
        lock(&self.rules).changes
    }

    /// Takes the rules the store holds now (another daemon of the fleet may have changed them),
    /// read after this daemon had made `seen` changes of its own, and announces them to the
    /// workspace's live sessions when they differ from the list in force. Skipped while an add of
    /// this daemon's own is being written or once one applied since `seen`: the read may not hold
    /// it, and its write's own notice brings a read that does. Whether it took them.
    pub fn replace(&self, stored: &[Value], seen: u64) -> bool {
        let compiled: Vec<CompiledRule> = stored
            .iter()
            .filter_map(|r| rules::from_stored(r, &self.workspace))
            .take(rules::MAX_RULES_PER_SESSION)
            .collect();
        {
            let mut rules = lock(&self.rules);
            if rules.adding > 0 || rules.changes != seen {
                return false;
            }
            let same = rules.list.len() == compiled.len()
                && rules.list.iter().zip(&compiled).all(|(a, b)| a.rule == b.rule);
            if same {
                return true;
            }
            rules.list = Arc::new(compiled);
        }
        (self.announce)(&self.workspace, "");
        true
    }

    /// Removes a rule once its removal is on disk; until then it goes on applying, and when the
    /// store refuses, it stays.
    pub async fn remove(&self, rule_id: &str) -> Result<(), RuleError> {
        if !self.snapshot().iter().any(|r| r.rule.rule_id == rule_id) {
            return Err(RuleError::NotFound);
        }
        self.store
            .delete_workspace_rule(&self.workspace.to_string_lossy(), rule_id)
            .await
            .map_err(RuleError::Store)?;
        {
            let mut rules = lock(&self.rules);
            let next: Vec<CompiledRule> =
                rules.list.iter().filter(|r| r.rule.rule_id != rule_id).cloned().collect();
            rules.list = Arc::new(next);
            rules.changes += 1;
        }
        (self.announce)(&self.workspace, "");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::store::MemoryStore;

    fn stored(id: &str, path: &str) -> Value {
        json!({"ruleId": id, "effect": "allow", "kinds": ["read"], "paths": [path], "createdAt": 1})
    }

    /// The rules of `/ws` on a memory store, and how many times they were announced.
    fn workspace() -> (Arc<WorkspaceRules>, Arc<AtomicUsize>) {
        let announced = Arc::new(AtomicUsize::new(0));
        let count = announced.clone();
        let rules = WorkspaceRules::new(
            PathBuf::from("/ws"),
            &[stored("r1", "one*")],
            Arc::new(MemoryStore::default()),
            Box::new(move |_, _| {
                count.fetch_add(1, Ordering::Relaxed);
            }),
        );
        (Arc::new(rules), announced)
    }

    fn ids(rules: &WorkspaceRules) -> Vec<String> {
        rules.snapshot().iter().map(|r| r.rule.rule_id.clone()).collect()
    }

    /// What the store holds replaces the list, and is announced, only when it differs from the
    /// list in force: a read that finds nothing new (a forged notice, this daemon's own) tells no
    /// session anything.
    #[test]
    fn a_read_that_finds_the_rules_in_force_announces_nothing() {
        let (rules, announced) = workspace();
        assert!(rules.replace(&[stored("r1", "one*")], 0));
        assert_eq!(announced.load(Ordering::Relaxed), 0);
        assert!(rules.replace(&[stored("r1", "one*"), stored("r2", "two*")], 0));
        assert_eq!((ids(&rules), announced.load(Ordering::Relaxed)), (vec!["r1".into(), "r2".into()], 1));
        assert!(rules.replace(&[stored("r1", "changed*"), stored("r2", "two*")], 0), "same ids, other paths");
        assert_eq!(announced.load(Ordering::Relaxed), 2);
        assert!(rules.replace(&[], 0));
        assert_eq!((ids(&rules), announced.load(Ordering::Relaxed)), (Vec::<String>::new(), 3));
    }

    /// A read begun before a change of this daemon's own applied may not hold it: it is not taken
    /// (the change's own notice brings a read after it), nor while an add is being written.
    #[tokio::test]
    async fn a_read_older_than_a_change_made_here_does_not_undo_it() {
        let (rules, announced) = workspace();
        let seen = rules.changes();
        let added = rules.add(rules::from_stored(&stored("r2", "two*"), Path::new("/ws")).expect("rule"), "");
        added.await.expect("added");
        assert_eq!(announced.load(Ordering::Relaxed), 1);
        assert!(!rules.replace(&[stored("r1", "one*")], seen), "read before the add");
        assert_eq!(ids(&rules), ["r1", "r2"]);
        assert!(rules.replace(&[stored("r1", "one*"), stored("r2", "two*")], rules.changes()));
        assert_eq!(announced.load(Ordering::Relaxed), 1, "nothing new");
        let seen = rules.changes();
        rules.remove("r1").await.expect("removed");
        assert!(
            !rules.replace(&[stored("r1", "one*"), stored("r2", "two*")], seen),
            "read before the remove"
        );
        assert_eq!(ids(&rules), ["r2"]);
        lock(&rules.rules).adding = 1;
        assert!(!rules.replace(&[], rules.changes()), "an add being written");
        assert_eq!(ids(&rules), ["r2"]);
    }
}
