//! A reviewer's verdict line, parsed strictly: anything but exactly
//! `{"id", "verdict": "allow"|"deny"|"escalate", "reason", "optionId"?}` is garbage, and garbage is
//! never a decision (`docs/operations.md#reviewers`). Pure.

use serde_json::{Map, Value};

use crate::permission::{Review, Verdict};

/// Longest reason kept, in bytes: it is shown on every card and kept in the audit; a reviewer
/// explaining itself in more than a screen is out of protocol.
pub(crate) const MAX_REASON_BYTES: usize = 2048;
/// Longest option id a verdict may pick (ACP's ids are short words).
const MAX_OPTION_ID_BYTES: usize = 256;

/// Why a line is not a verdict, and the request it names when it names one (then only that request
/// fails; a line naming none puts the whole stream in doubt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Garbage {
    pub(crate) id: Option<String>,
    pub(crate) why: String,
}

/// The members a verdict has beside a command reviewer's `id`.
const VERDICT_MEMBERS: &[&str] = &["verdict", "reason", "optionId"];

/// The request id and the review of one verdict line.
pub(crate) fn parse(line: &[u8]) -> Result<(String, Review), Garbage> {
    let fail = |id: Option<&str>, why: String| Garbage { id: id.map(str::to_owned), why };
    let value: Value = serde_json::from_slice(line).map_err(|_| fail(None, "not JSON".to_owned()))?;
    let Value::Object(mut fields) = value else { return Err(fail(None, "not a JSON object".to_owned())) };
    let Some(Value::String(id)) = fields.remove("id") else {
        return Err(fail(None, "no string id".to_owned()));
    };
    let review = verdict(&fields).map_err(|why| fail(Some(&id), why))?;
    Ok((id, review))
}

/// A verdict object without an id (a model reviewer's answer, `super::model`; a command
/// reviewer's line once its `id` is taken out): exactly `verdict`, `reason` and optionally
/// `optionId`, else why not.
pub(crate) fn verdict(fields: &Map<String, Value>) -> Result<Review, String> {
    if let Some(key) = fields.keys().find(|k| !VERDICT_MEMBERS.contains(&k.as_str())) {
        return Err(format!("unknown member {key:?}"));
    }
    let verdict = match fields.get("verdict").and_then(Value::as_str) {
        Some("allow") => Verdict::Allow,
        Some("deny") => Verdict::Deny,
        Some("escalate") => Verdict::Escalate,
        _ => return Err("verdict is not \"allow\", \"deny\" or \"escalate\"".to_owned()),
    };
    let reason = match fields.get("reason") {
        Some(Value::String(r)) if r.len() <= MAX_REASON_BYTES => r.clone(),
        Some(Value::String(_)) => return Err(format!("reason longer than {MAX_REASON_BYTES} bytes")),
        _ => return Err("no string reason".to_owned()),
    };
    let option_id = match fields.get("optionId") {
        None => None,
        Some(Value::String(o)) if !o.is_empty() && o.len() <= MAX_OPTION_ID_BYTES => Some(o.clone()),
        Some(_) => return Err("optionId is not a short non-empty string".to_owned()),
    };
    if option_id.is_some() && verdict == Verdict::Escalate {
        return Err("an escalate picks no option".to_owned());
    }
    Ok(Review { verdict, reason, option_id, failure: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_line_is_taken_only_when_it_is_exactly_one() {
        let ok = |line: &str| parse(line.as_bytes()).expect(line);
        let (id, review) = ok(r#"{"id":"r1","verdict":"allow","reason":"a read"}"#);
        assert_eq!((id.as_str(), review.verdict, review.reason.as_str()), ("r1", Verdict::Allow, "a read"));
        let (_, review) = ok(r#"{"id":"r1","verdict":"deny","reason":"rm -rf","optionId":"reject"}"#);
        assert_eq!((review.verdict, review.option_id.as_deref()), (Verdict::Deny, Some("reject")));
        assert_eq!(ok(r#"{"id":"r1","verdict":"escalate","reason":""}"#).1.verdict, Verdict::Escalate);
        assert_eq!(ok(r#"{"id":"r1","verdict":"allow","reason":"x"}"#).1.failure, None);

        let garbage = |line: &str| parse(line.as_bytes()).expect_err(line);
        for (line, names) in [
            ("allow", None),
            ("[1]", None),
            (r#"{"verdict":"allow","reason":"x"}"#, None),
            (r#"{"id":7,"verdict":"allow","reason":"x"}"#, None),
            (r#"{"id":"r1","verdict":"ALLOW","reason":"x"}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"yes","reason":"x"}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"allow"}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"allow","reason":3}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"allow","reason":"x","optionId":""}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"escalate","reason":"x","optionId":"a"}"#, Some("r1")),
            (r#"{"id":"r1","verdict":"allow","reason":"x","remember":"workspace"}"#, Some("r1")),
        ] {
            assert_eq!(garbage(line).id.as_deref(), names, "{line}");
        }
        let long =
            format!(r#"{{"id":"r1","verdict":"allow","reason":"{}"}}"#, "x".repeat(MAX_REASON_BYTES + 1));
        assert!(garbage(&long).why.contains("longer"));
        let at_max =
            format!(r#"{{"id":"r1","verdict":"allow","reason":"{}"}}"#, "x".repeat(MAX_REASON_BYTES));
        assert_eq!(ok(&at_max).1.reason.len(), MAX_REASON_BYTES);
    }
}
