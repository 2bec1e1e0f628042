//! The permission policy and its consensus quorum.

use serde_json::Value;

use super::file::FileSettings;
use super::{ConfigError, Policy, ServeArgs, refuse};

/// The permission policy (flag, `serve.permissionPolicy`, then `policy.permissionStrategy`) and
/// the consensus quorum, with a warning when a quorum is set for another policy.
pub(super) fn permission_policy(
    args: &ServeArgs,
    file: &FileSettings,
    warnings: &mut Vec<String>,
) -> Result<(Policy, Option<usize>), ConfigError> {
    let policy_raw = match &args.permission_policy {
        Some(p) => p.clone(),
        None => match file.string("permissionPolicy")? {
            Some(p) => p,
            None => file.policy_strategy.clone().unwrap_or_else(|| "first-responder".into()),
        },
    };
    let policy = Policy::parse(&policy_raw).map_or_else(
        || {
            refuse(format!(
                "unknown permission policy {policy_raw:?} (expected first-responder, designated, consensus or local-only)"
            ))
        },
        Ok,
    )?;
    let quorum_raw: Option<String> = match &args.consensus_quorum {
        Some(q) => Some(q.clone()),
        None => match file.values.get("consensusQuorum").or(file.policy_quorum.as_ref()) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => Some(v.to_string()),
        },
    };
    let quorum = match quorum_raw {
        None => None,
        Some(q) => match q.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => return refuse(format!("consensus quorum {q:?} is not a positive integer")),
        },
    };
    if quorum.is_some() && policy != Policy::Consensus {
        warnings.push(format!(
            "a consensus quorum is set but the permission policy is {}; it has no effect",
            policy.as_str()
        ));
    }
    Ok((policy, quorum))
}
