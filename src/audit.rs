//! How an audit entry reads (`docs/protocol.md#142-the-audit-trail`): the decision in words, who
//! decided and how, what was asked; one identity shown one way; the CSV export's row; and the
//! `--since` a person types. The one reading of an entry `mediatord audit` and `GET
//! /audit?format=csv` share; the web app's twin is `web/audit.js` (and `web/names.js` for names).
//!
//! A leaf: it reads the entry's wire object (`serde_json::Value`) and imports only other leaves.

use serde_json::Value;

/// One identity, shown the same way everywhere: its name when it has one, else its id; the id
/// beside the name on demand (`with_id`). A paired device is `my phone`, or
/// `my phone (dev-483570d70212a2be)`; a client without a name is its id.
pub fn identity(name: Option<&str>, id: &str, with_id: bool) -> String {
    match name.filter(|n| !n.is_empty()) {
        Some(name) if with_id && !id.is_empty() && name != id => format!("{name} ({id})"),
        Some(name) => name.to_owned(),
        None => id.to_owned(),
    }
}

/// The kind of the option an entry's decision chose (`allow_once`, …), if it chose one.
fn chosen_kind(e: &Value) -> Option<&str> {
    let chosen = e["outcome"]["optionId"].as_str()?;
    let options = e["options"].as_array()?;
    options.iter().find(|o| o["optionId"].as_str() == Some(chosen))?["kind"].as_str()
}

/// The decision in words: `Allowed once`, `Always allowed`, `Allowed for this session`,
/// `Rejected`, `Allowed by rule`, `Timed out`, `Cancelled`, …; for a request that reached outside
/// the session's workspace (`outsideWorkspace`), what every door said of it, after the decision:
/// `Allowed once (outside the workspace: it will be refused)`.
pub fn decision(e: &Value) -> String {
    let words = decided(e);
    match e["outsideWorkspace"].as_array() {
        Some(paths) if !paths.is_empty() => format!("{words} ({})", crate::present::OUTSIDE_WORKSPACE),
        _ => words,
    }
}

fn decided(e: &Value) -> String {
    let by = e["resolvedBy"].as_str().unwrap_or("");
    match e["status"].as_str().unwrap_or("") {
        "pending" => "Pending".into(),
        "timed_out" => "Timed out".into(),
        "abandoned" => "Abandoned (the daemon stopped)".into(),
        "unapproved" => "Changed without approval".into(),
        "rewound" if e["filesFailed"].as_array().is_some_and(|f| !f.is_empty()) => {
            "Rewound, some files failed".into()
        }
        "rewound" => "Rewound".into(),
        "refused" => "Refused: an agent is never a client of the daemon".into(),
        "deleted" => "Session deleted".into(),
        "cancelled" if by == "session_closed" => "Cancelled (the session ended)".into(),
        "cancelled" => "Cancelled".into(),
        "selected" => {
            let kind = chosen_kind(e).unwrap_or("");
            let allow = kind.starts_with("allow");
            if by == "rule" {
                return if allow { "Allowed by rule" } else { "Rejected by rule" }.into();
            }
            let remembered = e["remembered"].as_str().unwrap_or("");
            let words = match (kind, remembered) {
                ("allow_always", "workspace") => "Always allowed in this workspace",
                ("allow_always", _) => "Always allowed",
                ("reject_always", "workspace") => "Always rejected in this workspace",
                ("reject_always", _) => "Always rejected",
                ("allow_once", "workspace") => "Allowed for this workspace",
                ("allow_once", "session") => "Allowed for this session",
                ("allow_once", _) => "Allowed once",
                ("reject_once", "workspace") => "Rejected for this workspace",
                ("reject_once", "session") => "Rejected for this session",
                ("reject_once", _) => "Rejected",
                _ => return format!("Chose {}", e["outcome"]["optionId"].as_str().unwrap_or("an option")),
            };
            words.into()
        }
        other => other.to_owned(),
    }
}

/// How it was decided: `vote`, `link` (a notification's action link), `ACP` (an editor's
/// answer), `reviewer` (a reviewer trusted with the kind), `rule`, `timeout`, `cancel`,
/// `session end`, `abandoned`; empty while pending.
pub fn how(e: &Value) -> &'static str {
    match (e["resolvedBy"].as_str().unwrap_or(""), e["via"].as_str().unwrap_or("")) {
        ("vote", "link") => "link",
        ("vote", "acp") => "ACP",
        ("vote", "reviewer") => "reviewer",
        ("vote", _) => "vote",
        ("rule", _) => "rule",
        ("timeout", _) => "timeout",
        ("cancel", _) => "cancel",
        ("session_closed", _) => "session end",
        ("abandoned", _) => "abandoned",
        ("daemon", _) => "daemon",
        ("rewind", _) => "rewind",
        ("client", _) => "client",
        _ => "",
    }
}

/// Who decided, in a few words: a device by its name (with its id when `with_id`), the operator's
/// client by its id (`operator · alice`), or `operator` alone when the vote named no client (a
/// notification's link to a target without a `clientId`, a vote sent without one); a reviewer by
/// its name (`reviewer guard`: its ballot is `reviewer:guard`'s, no client's); a rule by its id;
/// empty when nobody did.
pub fn who(e: &Value, with_id: bool) -> String {
    let client = e["voterClientId"].as_str().unwrap_or("");
    if how(e) == "reviewer" {
        return format!("reviewer {}", client.strip_prefix("reviewer:").unwrap_or(client));
    }
    match e["resolvedBy"].as_str().unwrap_or("") {
        "vote" | "rewind" => match e["voterDeviceName"].as_str() {
            Some(name) => identity(Some(name), client, with_id),
            None if client.is_empty() => "operator".to_owned(),
            None => format!("operator · {client}"),
        },
        "rule" => format!("rule {}", e["ruleId"].as_str().unwrap_or("")),
        _ => String::new(),
    }
}

/// What was asked: the tool's kind and title, then its command or paths.
pub fn what(e: &Value) -> String {
    let tool = &e["toolCall"];
    let mut out = [tool["kind"].as_str(), tool["title"].as_str()]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let target = match tool["command"].as_str() {
        Some(command) if !command.is_empty() => command.to_owned(),
        _ => paths(e),
    };
    if !target.is_empty() && !out.contains(&target) {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&target);
    }
    out
}

fn paths(e: &Value) -> String {
    let paths = e["toolCall"]["paths"].as_array().map(Vec::as_slice).unwrap_or_default();
    paths.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")
}

/// `mediatord audit`'s columns; the last, what was asked, is the rest of the line.
const TABLE_HEADER: [&str; 7] = ["REQUESTED", "DECISION", "BY", "HOW", "POLICY", "SESSION", "WHAT"];

/// `entries` as `mediatord audit`'s table: the header, then a row per entry, every column as wide
/// as its widest cell (in terminal columns), so a long voter id or decision widens its column
/// instead of pushing the rest of its row out of line; the last column unpadded. Every cell is
/// [`crate::text::escape`]d, an empty one is `-`; `with_ids` shows a device's id beside its name.
pub fn table(entries: &[Value], with_ids: bool) -> String {
    let mut rows: Vec<Vec<String>> = vec![TABLE_HEADER.map(str::to_owned).to_vec()];
    for e in entries {
        let at = time(&e["issuedAt"]);
        rows.push(vec![
            shown(&at),
            shown(&decision(e)),
            shown(&who(e, with_ids)),
            shown(how(e)),
            shown(e["policy"].as_str().unwrap_or("")),
            shown(e["sessionId"].as_str().unwrap_or("")),
            crate::text::escape(&what(e)).into_owned(),
        ]);
    }
    aligned(&rows)
}

/// A time of an entry (ms since the epoch) as ISO-8601 UTC; empty when it has none.
fn time(v: &Value) -> String {
    v.as_u64().map(crate::clock::iso8601).unwrap_or_default()
}

/// A text field of an entry; empty when it is absent or not a string.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// A table cell: `s` escaped for a terminal, `-` when empty.
fn shown(s: &str) -> String {
    if s.is_empty() { "-".to_owned() } else { crate::text::escape(s).into_owned() }
}

/// `rows` (the header first, every row as long) as lines, each column but the last padded to its
/// widest cell in terminal columns, two spaces apart.
fn aligned(rows: &[Vec<String>]) -> String {
    let width = |s: &str| unicode_width::UnicodeWidthStr::width(s);
    let columns = rows.first().map_or(0, Vec::len);
    let mut widths = vec![0usize; columns.saturating_sub(1)];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(width(cell));
        }
    }
    let mut out = String::new();
    for row in rows {
        for (cell, w) in row.iter().zip(&widths) {
            out.push_str(cell);
            out.push_str(&" ".repeat(w - width(cell) + 2));
        }
        out.push_str(row.last().map_or("", String::as_str));
        out.push('\n');
    }
    out
}

/// The CSV export's columns (`GET /audit?format=csv`), one line.
pub const CSV_HEADER: &str = "requested_at,decision,who,device_id,client_id,how,tool,title,command,paths,\
policy,session_id,workspace,request_id,status,resolved_at,latency_ms,rule_id\r\n";

/// One entry as a CSV line (RFC 4180, CRLF) under [`CSV_HEADER`]; times as ISO-8601 UTC.
pub fn csv_line(e: &Value) -> String {
    let device_id = if e["voterDeviceName"].is_string() { text(&e["voterClientId"]) } else { String::new() };
    let cells = [
        time(&e["issuedAt"]),
        decision(e),
        who(e, false),
        device_id,
        text(&e["voterClientId"]),
        how(e).to_owned(),
        text(&e["toolCall"]["kind"]),
        text(&e["toolCall"]["title"]),
        text(&e["toolCall"]["command"]),
        paths(e),
        text(&e["policy"]),
        text(&e["sessionId"]),
        text(&e["workspace"]),
        text(&e["requestId"]),
        text(&e["status"]),
        time(&e["resolvedAt"]),
        e["latencyMs"].as_u64().map(|ms| ms.to_string()).unwrap_or_default(),
        text(&e["ruleId"]),
    ];
    csv_row(&cells)
}

/// `cells` as one CSV line, each [`csv_cell`], ending in CRLF.
fn csv_row(cells: &[String]) -> String {
    let mut line = cells.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(",");
    line.push_str("\r\n");
    line
}

/// A cell as CSV writes it, safe to `cat` and to open in a spreadsheet: every character a reader
/// cannot see as itself is escaped (`text::escape`: a line break is `\n`, also inside a quoted
/// cell, so a row never spans two lines; an escape sequence or a bidi override is written out), one
/// that a spreadsheet would take for a formula (starting with `=`, `+`, `-` or `@`: OWASP's "CSV
/// injection") gets a leading `'`, and one holding a comma or a quote is quoted with its quotes
/// doubled.
pub fn csv_cell(cell: &str) -> String {
    let cell = crate::text::escape(cell);
    let formula = cell.starts_with(['=', '+', '-', '@']);
    let cell = if formula { format!("'{cell}") } else { cell.into_owned() };
    if cell.contains([',', '"', '\n', '\r']) { format!("\"{}\"", cell.replace('"', "\"\"")) } else { cell }
}

/// What a review did to its request (`mediatord review-log`'s EFFECT, [`ReviewFilter::effect`]):
/// `failed` (no verdict: a timeout, a crash, garbage, an endpoint not reached), `decided` (its
/// ballot decided), `overruled` (a person decided against its allow or deny), else `informed` (it
/// was shown and the people decided).
pub fn review_effect(review: &Value) -> &'static str {
    if review["failure"].is_string() {
        "failed"
    } else if review["decides"] == true {
        "decided"
    } else if review["overruled"] == true {
        "overruled"
    } else {
        "informed"
    }
}

/// The effects [`review_effect`] names, in the order `--effect`'s help lists them.
pub const REVIEW_EFFECTS: [&str; 4] = ["decided", "informed", "overruled", "failed"];

/// Which reviews of an audit entry `mediatord review-log` shows: all, or one reviewer's, one
/// verdict's (`allow`, `deny`, `escalate`), one [`review_effect`]'s.
#[derive(Debug, Default, Clone)]
pub struct ReviewFilter {
    pub reviewer: Option<String>,
    pub verdict: Option<String>,
    pub effect: Option<String>,
}

impl ReviewFilter {
    /// The reviews of `entry` (its `reviews`, in the order they came) this filter keeps.
    pub fn reviews<'e>(&self, entry: &'e Value) -> impl Iterator<Item = &'e Value> {
        let all = entry["reviews"].as_array().map(Vec::as_slice).unwrap_or_default();
        let is = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        all.iter().filter(move |r| {
            is(&self.reviewer, r["reviewer"].as_str().unwrap_or(""))
                && is(&self.verdict, r["verdict"].as_str().unwrap_or(""))
                && is(&self.effect, review_effect(r))
        })
    }
}

/// How the request a review was of ended, in a few words: the decision, then who decided it
/// (`Allowed once by my phone`, `Rejected by reviewer guard`, `Allowed by rule r1`, `Timed out`).
fn review_outcome(e: &Value) -> String {
    let words = decision(e);
    match who(e, false) {
        who if who.is_empty() => words,
        _ if how(e) == "rule" => {
            format!("{words} {}", e["ruleId"].as_str().unwrap_or("")).trim_end().to_owned()
        }
        who => format!("{words} by {who}"),
    }
}

/// A review's effect as its table cell: a failure says which (`failed (timeout)`).
fn effect_cell(review: &Value) -> String {
    match review["failure"].as_str() {
        Some(failure) => format!("failed ({failure})"),
        None => review_effect(review).to_owned(),
    }
}

/// `mediatord review-log`'s columns; the last, the reviewer's reason, is the rest of the line.
const REVIEW_HEADER: [&str; 8] =
    ["REVIEWED", "REVIEWER", "VERDICT", "EFFECT", "OUTCOME", "SESSION", "WHAT", "REASON"];

/// `rows` (an audit entry and one of its reviews each) as `mediatord review-log`'s table, laid out
/// and escaped as [`table`]'s.
pub fn review_table(rows: &[(&Value, &Value)]) -> String {
    let mut lines: Vec<Vec<String>> = vec![REVIEW_HEADER.map(str::to_owned).to_vec()];
    for (e, r) in rows {
        let at = time(&r["at"]);
        lines.push(vec![
            shown(&at),
            shown(r["reviewer"].as_str().unwrap_or("")),
            shown(r["verdict"].as_str().unwrap_or("")),
            shown(&effect_cell(r)),
            shown(&review_outcome(e)),
            shown(e["sessionId"].as_str().unwrap_or("")),
            shown(&what(e)),
            crate::text::escape(r["reason"].as_str().unwrap_or("")).into_owned(),
        ]);
    }
    aligned(&lines)
}

/// `mediatord review-log --csv`'s columns, one line.
pub const REVIEW_CSV_HEADER: &str = "reviewed_at,reviewer,verdict,effect,failure,reason,option_id,outcome,\
decided_by,how,tool,title,command,paths,session_id,workspace,request_id,requested_at\r\n";

/// One review of entry `e` as a CSV line under [`REVIEW_CSV_HEADER`], as [`csv_line`] writes.
pub fn review_csv_line(e: &Value, r: &Value) -> String {
    csv_row(&[
        time(&r["at"]),
        text(&r["reviewer"]),
        text(&r["verdict"]),
        review_effect(r).to_owned(),
        text(&r["failure"]),
        text(&r["reason"]),
        text(&r["optionId"]),
        decision(e),
        who(e, false),
        how(e).to_owned(),
        text(&e["toolCall"]["kind"]),
        text(&e["toolCall"]["title"]),
        text(&e["toolCall"]["command"]),
        paths(e),
        text(&e["sessionId"]),
        text(&e["workspace"]),
        text(&e["requestId"]),
        time(&e["issuedAt"]),
    ])
}

/// One review of entry `e` as `mediatord review-log --json` prints it: the review as the audit
/// holds it (`docs/protocol.md#86-reviewers`) with its `effect`, and what it was of: the request's
/// ids, `toolCall`, `issuedAt`, `status`, and its `outcome` and `decidedBy` in words.
pub fn review_json(e: &Value, r: &Value) -> Value {
    let mut out = r.clone();
    if let Value::Object(o) = &mut out {
        o.insert("effect".into(), review_effect(r).into());
        for key in ["requestId", "sessionId", "workspace", "toolCall", "issuedAt", "status"] {
            o.insert(key.into(), e[key].clone());
        }
        o.insert("outcome".into(), decision(e).into());
        o.insert("decidedBy".into(), who(e, false).into());
    }
    out
}

/// `--since` as a person types it, relative to `now` (milliseconds since the UNIX epoch): an age
/// (`90s`, `30m`, `1h`, `2d`, `1w`), a UTC date or time (`2026-11-22`, `2026-11-22T20:39`), or
/// milliseconds since the epoch (all digits, as before).
pub fn parse_since(text: &str, now: u64) -> Result<u64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().map_err(|_| format!("{text:?} is too large"));
    }
    if let Some(unit) = text.chars().last()
        && let Some(scale) = match unit {
            's' => Some(1_000u64),
            'm' => Some(60_000),
            'h' => Some(3_600_000),
            'd' => Some(86_400_000),
            'w' => Some(604_800_000),
            _ => None,
        }
        && let Ok(n) = text[..text.len() - 1].parse::<u64>()
    {
        return n
            .checked_mul(scale)
            .map(|age| now.saturating_sub(age))
            .ok_or_else(|| format!("{text:?} is too long ago"));
    }
    crate::clock::parse_utc(text).ok_or_else(|| {
        format!("{text:?} is not an age (90s, 30m, 1h, 2d, 1w), a UTC date (2026-11-22, 2026-11-22T20:39) or epoch milliseconds")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn entry(status: &str, by: Option<&str>, chosen: Option<&str>, remembered: Option<&str>) -> Value {
        json!({
            "requestId": "r1", "sessionId": "s1", "workspace": "/ws", "policy": "first-responder",
            "toolCall": {"kind": "edit", "title": "Write notes/a.txt", "paths": ["/ws/notes/a.txt"], "command": null},
            "options": [
                {"optionId": "a1", "kind": "allow_once", "name": "Allow"},
                {"optionId": "aa", "kind": "allow_always", "name": "Always"},
                {"optionId": "r1", "kind": "reject_once", "name": "Reject"},
                {"optionId": "ra", "kind": "reject_always", "name": "Never"},
                {"optionId": "odd", "kind": "modify_request", "name": "Modify"},
            ],
            "status": status, "resolvedBy": by,
            "outcome": chosen.map(|id| json!({"outcome": "selected", "optionId": id})),
            "remembered": remembered, "issuedAt": 1_795_379_959_849u64,
        })
    }

    #[test]
    fn every_decision_reads_in_words() {
        // Selected by a vote: the option and what was remembered.
        let voted = |option, remembered| entry("selected", Some("vote"), Some(option), remembered);
        let cases = [
            (voted("a1", None), "Allowed once"),
            (voted("a1", Some("session")), "Allowed for this session"),
            (voted("a1", Some("workspace")), "Allowed for this workspace"),
            (voted("aa", Some("session")), "Always allowed"),
            (voted("aa", Some("workspace")), "Always allowed in this workspace"),
            (voted("r1", None), "Rejected"),
            (voted("r1", Some("session")), "Rejected for this session"),
            (voted("r1", Some("workspace")), "Rejected for this workspace"),
            (voted("ra", Some("session")), "Always rejected"),
            (voted("ra", Some("workspace")), "Always rejected in this workspace"),
            (entry("selected", Some("rule"), Some("a1"), None), "Allowed by rule"),
            (entry("selected", Some("rule"), Some("r1"), None), "Rejected by rule"),
            (voted("odd", None), "Chose odd"),
            (voted("gone", None), "Chose gone"),
            (entry("timed_out", Some("timeout"), None, None), "Timed out"),
            (entry("cancelled", Some("cancel"), None, None), "Cancelled"),
            (entry("cancelled", Some("session_closed"), None, None), "Cancelled (the session ended)"),
            (entry("abandoned", Some("abandoned"), None, None), "Abandoned (the daemon stopped)"),
            (entry("pending", None, None, None), "Pending"),
            (entry("later", None, None, None), "later"),
            (entry("unapproved", Some("daemon"), None, None), "Changed without approval"),
            (entry("rewound", Some("rewind"), None, None), "Rewound"),
        ];
        for (e, words) in cases {
            assert_eq!(decision(&e), words, "{e}");
        }
        let mut failed = entry("rewound", Some("rewind"), None, None);
        failed["filesFailed"] = serde_json::json!(["a.txt"]);
        assert_eq!(decision(&failed), "Rewound, some files failed");
    }

    #[test]
    fn a_rewind_names_who_did_it_and_an_unapproved_change_names_the_daemon() {
        let mut rewind = entry("rewound", Some("rewind"), None, None);
        rewind["voterClientId"] = "alice".into();
        assert_eq!((who(&rewind, false), how(&rewind)), ("operator · alice".to_owned(), "rewind"));
        rewind["voterDeviceName"] = "phone".into();
        assert_eq!(who(&rewind, false), "phone");
        let unapproved = entry("unapproved", Some("daemon"), None, None);
        assert_eq!((who(&unapproved, false), how(&unapproved)), (String::new(), "daemon"));
    }

    #[test]
    fn a_request_outside_the_workspace_says_so_after_its_decision() {
        let mut e = entry("selected", Some("vote"), Some("a1"), None);
        e["outsideWorkspace"] = json!(["/outside.txt"]);
        assert_eq!(decision(&e), "Allowed once (outside the workspace: it will be refused)");
        e["outsideWorkspace"] = json!([]);
        assert_eq!(decision(&e), "Allowed once");
        let mut pending = entry("pending", None, None, None);
        pending["outsideWorkspace"] = json!(["/etc/passwd"]);
        assert_eq!(decision(&pending), "Pending (outside the workspace: it will be refused)");
    }

    #[test]
    fn who_and_how_name_the_device_the_operator_the_rule() {
        let mut e = entry("selected", Some("vote"), Some("a1"), None);
        e["voterClientId"] = json!("dev-483570d70212a2be");
        e["voterDeviceName"] = json!("my phone");
        assert_eq!(who(&e, false), "my phone");
        assert_eq!(who(&e, true), "my phone (dev-483570d70212a2be)");
        assert_eq!(how(&e), "vote");
        e["via"] = json!("link");
        assert_eq!(how(&e), "link");
        e["via"] = json!("acp");
        assert_eq!(how(&e), "ACP");
        e["via"] = json!("rest");
        assert_eq!(how(&e), "vote");
        e["voterDeviceName"] = Value::Null;
        e["voterClientId"] = json!("alice");
        assert_eq!(who(&e, true), "operator · alice");
        // A link to a target without a client id, or a vote sent without one: no dangling "·".
        for anonymous in [Value::Null, json!("")] {
            e["voterClientId"] = anonymous;
            assert_eq!(who(&e, true), "operator");
        }
        // A reviewer trusted with the kind decided: by its name, never as the operator's client.
        e["voterClientId"] = json!("reviewer:guard");
        e["via"] = json!("reviewer");
        assert_eq!((who(&e, true).as_str(), how(&e)), ("reviewer guard", "reviewer"));
        let mut rule = entry("selected", Some("rule"), Some("a1"), None);
        rule["ruleId"] = json!("rule-7");
        assert_eq!((who(&rule, false).as_str(), how(&rule)), ("rule rule-7", "rule"));
        for (by, words) in [
            ("timeout", "timeout"),
            ("cancel", "cancel"),
            ("session_closed", "session end"),
            ("abandoned", "abandoned"),
        ] {
            let e = entry("cancelled", Some(by), None, None);
            assert_eq!((how(&e), who(&e, true).as_str()), (words, ""));
        }
        assert_eq!(how(&entry("pending", None, None, None)), "");
    }

    #[test]
    fn an_identity_is_its_name_with_the_id_on_demand() {
        assert_eq!(identity(Some("my phone"), "dev-1", false), "my phone");
        assert_eq!(identity(Some("my phone"), "dev-1", true), "my phone (dev-1)");
        assert_eq!(identity(None, "dev-1", true), "dev-1");
        assert_eq!(identity(Some(""), "dev-1", false), "dev-1");
        assert_eq!(identity(Some("alice"), "alice", true), "alice");
        assert_eq!(identity(Some("my phone"), "", true), "my phone");
    }

    #[test]
    fn what_names_the_tool_then_its_command_or_paths() {
        let e = entry("pending", None, None, None);
        assert_eq!(what(&e), "edit Write notes/a.txt: /ws/notes/a.txt");
        let mut run = e.clone();
        run["toolCall"] =
            json!({"kind": "execute", "title": "Run", "paths": ["/ws"], "command": "rm -rf build"});
        assert_eq!(what(&run), "execute Run: rm -rf build");
        run["toolCall"]["title"] = json!("rm -rf build");
        assert_eq!(what(&run), "execute rm -rf build", "a title that is the command is not repeated");
        assert_eq!(what(&json!({"toolCall": {"paths": ["/a", "/b"]}})), "/a /b");
        assert_eq!(what(&json!({})), "");
    }

    #[test]
    fn a_table_column_is_as_wide_as_its_widest_cell() {
        let mut short = entry("selected", Some("vote"), Some("a1"), None);
        short["voterClientId"] = json!("alice");
        short["sessionId"] = json!("s1");
        let mut long = entry("selected", Some("vote"), Some("r1"), None);
        long["voterClientId"] = json!("connect-5f0c9e59-46d7-4b3b-8d59-64fd0f1b40c2");
        long["sessionId"] = json!("s2");
        long["via"] = json!("link");
        let pending = entry("pending", None, None, None);
        let text = table(&[short, long, pending], false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        // Every row's columns start where the header's do (in terminal columns: `·` is one).
        let starts = |line: &str| -> Vec<usize> {
            ["first-responder", "s1", "s2", "POLICY", "SESSION"]
                .iter()
                .filter_map(|needle| line.find(needle))
                .map(|at| unicode_width::UnicodeWidthStr::width(&line[..at]))
                .collect()
        };
        let header = starts(lines[0]);
        assert_eq!(starts(lines[1]), header, "{text}");
        assert_eq!(starts(lines[2]), header, "{text}");
        assert!(
            lines[2].contains("operator · connect-5f0c9e59-46d7-4b3b-8d59-64fd0f1b40c2  link "),
            "{text}"
        );
        assert!(lines[3].contains("Pending  ") && lines[3].contains(" -  "), "{text}");
        assert!(lines[1].ends_with("edit Write notes/a.txt: /ws/notes/a.txt"), "{text}");
        // Wide characters count as the columns a terminal gives them.
        let mut wide = entry("selected", Some("vote"), Some("a1"), None);
        wide["voterClientId"] = json!("dev-1");
        wide["voterDeviceName"] = json!("電話");
        let text = table(&[wide, entry("pending", None, None, None)], false);
        let lines: Vec<&str> = text.lines().collect();
        let col =
            |l: &str| unicode_width::UnicodeWidthStr::width(&l[..l.find("first-responder").expect("policy")]);
        assert_eq!(col(lines[1]), col(lines[2]), "{text}");
    }

    #[test]
    fn csv_cells_are_quoted_and_formulas_defused() {
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell(""), "");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("two\nlines"), "two\\nlines", "a row never spans two lines");
        assert_eq!(csv_cell("cr\rhere"), "cr\\rhere");
        assert_eq!(csv_cell("a,\nb"), "\"a,\\nb\"", "escaped inside a quoted cell too");
        assert_eq!(
            csv_cell("x\n# Permission asked\u{1b}]52;c;cHduZWQ=\u{7}\u{202e}txt"),
            "x\\n# Permission asked\\u{1b}]52;c;cHduZWQ=\\u{7}\\u{202e}txt"
        );
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)"] {
            assert_eq!(csv_cell(formula), format!("'{formula}"), "{formula:?}");
        }
        assert_eq!(csv_cell("\rx"), "\\rx", "escaped: no longer a formula");
        assert_eq!(csv_cell("\tx"), "\\tx");
        assert_eq!(csv_cell("=HYPERLINK(\"x\",\"y\")"), "\"'=HYPERLINK(\"\"x\"\",\"\"y\"\")\"");
        assert_eq!(csv_cell("a=b"), "a=b", "only a leading sign is a formula");
    }

    #[test]
    fn a_csv_line_has_every_column_of_the_header() {
        let mut e = entry("selected", Some("vote"), Some("r1"), None);
        e["toolCall"]["command"] = json!("=cmd|' /C calc'!A0, then more");
        e["voterClientId"] = json!("dev-1");
        e["voterDeviceName"] = json!("my phone");
        e["resolvedAt"] = json!(1_795_379_960_000u64);
        e["latencyMs"] = json!(151);
        let line = csv_line(&e);
        assert!(line.ends_with("\r\n"));
        assert!(line.starts_with(
            "2026-11-22T20:39:19.849Z,Rejected,my phone,dev-1,dev-1,vote,edit,Write notes/a.txt,"
        ));
        assert!(line.contains(",\"'=cmd|' /C calc'!A0, then more\","), "{line}");
        assert!(
            line.contains(",first-responder,s1,/ws,r1,selected,2026-11-22T20:39:20.000Z,151,\r\n"),
            "{line}"
        );
        let columns = |l: &str| l.trim_end().split(',').count();
        let plain = csv_line(&entry("pending", None, None, None));
        assert_eq!(columns(&plain), columns(CSV_HEADER));
        assert!(plain.starts_with("2026-11-22T20:39:19.849Z,Pending,,,,,edit,"), "{plain}");
    }

    /// An entry decided as `by` with three reviews: guard's allow (it decided when `by` is a
    /// reviewer's vote), audit's deny (overruled when a person allowed), slow's timeout.
    fn reviewed(voter: &str, via: &str) -> Value {
        let mut e = entry("selected", Some("vote"), Some("a1"), None);
        e["voterClientId"] = json!(voter);
        e["via"] = json!(via);
        let by_guard = voter == "reviewer:guard";
        e["reviews"] = json!([
            {"reviewer": "guard", "verdict": "allow", "reason": "reads only", "decides": by_guard, "at": 1_795_379_960_000u64},
            {"reviewer": "audit", "verdict": "deny", "reason": "no,\u{1b}[2J", "decides": false, "overruled": !by_guard, "at": 1_795_379_960_001u64, "optionId": "r1"},
            {"reviewer": "slow", "verdict": "escalate", "reason": "no verdict in 5000 ms", "decides": false, "failure": "timeout", "at": 1_795_379_965_000u64},
        ]);
        e
    }

    #[test]
    fn a_review_did_one_thing_and_a_filter_keeps_what_it_names() {
        let e = reviewed("alice", "rest");
        let effects: Vec<&str> =
            e["reviews"].as_array().expect("reviews").iter().map(review_effect).collect();
        assert_eq!(effects, ["informed", "overruled", "failed"]);
        let by_guard = reviewed("reviewer:guard", "reviewer");
        assert_eq!(review_effect(&by_guard["reviews"][0]), "decided");
        assert_eq!(review_effect(&json!({"decides": false, "overruled": false})), "informed");
        // A failure is a failure even when marked otherwise.
        assert_eq!(review_effect(&json!({"failure": "crash", "decides": true})), "failed");
        assert_eq!(review_effect(&json!({"decides": "true"})), "informed", "only a JSON true decides");

        let names = |f: ReviewFilter| -> Vec<String> {
            f.reviews(&e).map(|r| r["reviewer"].as_str().expect("name").to_owned()).collect()
        };
        assert_eq!(names(ReviewFilter::default()), ["guard", "audit", "slow"]);
        let one = |reviewer: Option<&str>, verdict: Option<&str>, effect: Option<&str>| ReviewFilter {
            reviewer: reviewer.map(str::to_owned),
            verdict: verdict.map(str::to_owned),
            effect: effect.map(str::to_owned),
        };
        assert_eq!(names(one(Some("audit"), None, None)), ["audit"]);
        assert_eq!(names(one(None, Some("escalate"), None)), ["slow"]);
        assert_eq!(names(one(None, None, Some("overruled"))), ["audit"]);
        assert_eq!(names(one(Some("guard"), Some("allow"), Some("informed"))), ["guard"]);
        assert!(names(one(Some("guard"), Some("deny"), None)).is_empty(), "every filter holds");
        assert!(names(one(Some("guard"), None, Some("failed"))).is_empty());
        assert!(ReviewFilter::default().reviews(&entry("pending", None, None, None)).next().is_none());
    }

    #[test]
    fn a_review_row_says_what_it_did_to_which_request_and_why() {
        let e = reviewed("alice", "rest");
        let rows: Vec<(&Value, &Value)> = ReviewFilter::default().reviews(&e).map(|r| (&e, r)).collect();
        let text = review_table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("REVIEWED") && lines[0].ends_with("REASON"));
        assert!(lines[1].starts_with("2026-11-22T20:39:20.000Z  guard     allow     informed    "), "{text}");
        assert!(lines[1].contains("  Allowed once by operator · alice  "), "{text}");
        assert!(lines[1].ends_with("  edit Write notes/a.txt: /ws/notes/a.txt  reads only"), "{text}");
        assert!(lines[2].ends_with(r"no,\u{1b}[2J"), "escaped: {text}");
        assert!(lines[3].contains(" failed (timeout) "), "{text}");
        // Columns line up: the session column starts at the same terminal column on every row.
        let at = |l: &str| unicode_width::UnicodeWidthStr::width(&l[..l.find(" s1 ").expect("session")]);
        assert!(lines[2..].iter().all(|l| at(l) == at(lines[1])), "{text}");

        // Who decided, in words: a reviewer, a rule, nobody.
        let by_guard = reviewed("reviewer:guard", "reviewer");
        assert_eq!(review_outcome(&by_guard), "Allowed once by reviewer guard");
        let mut ruled = entry("selected", Some("rule"), Some("r1"), None);
        ruled["ruleId"] = json!("no-secrets");
        assert_eq!(review_outcome(&ruled), "Rejected by rule no-secrets");
        assert_eq!(review_outcome(&entry("timed_out", Some("timeout"), None, None)), "Timed out");

        let line = review_csv_line(&e, &e["reviews"][1]);
        assert!(line.ends_with("\r\n"));
        assert!(
            line.starts_with(r#"2026-11-22T20:39:20.001Z,audit,deny,overruled,,"no,\u{1b}[2J",r1,Allowed once,operator · alice,vote,edit,Write notes/a.txt,,/ws/notes/a.txt,s1,/ws,r1,2026-11-22T20:39:19.849Z"#),
            "{line}"
        );
        let columns = |l: &str| l.trim_end().split(',').count();
        let failed = review_csv_line(&e, &e["reviews"][2]);
        assert_eq!(columns(&failed), columns(REVIEW_CSV_HEADER), "{failed}");
        assert!(failed.contains(",slow,escalate,failed,timeout,no verdict in 5000 ms,,"), "{failed}");

        let j = review_json(&e, &e["reviews"][2]);
        assert_eq!(
            (&j["reviewer"], &j["effect"], &j["failure"], &j["outcome"], &j["decidedBy"]),
            (
                &json!("slow"),
                &json!("failed"),
                &json!("timeout"),
                &json!("Allowed once"),
                &json!("operator · alice")
            )
        );
        for key in ["requestId", "sessionId", "workspace", "toolCall", "issuedAt", "status"] {
            assert_eq!(j[key], e[key], "{key}");
        }
    }

    #[test]
    fn since_takes_an_age_a_date_or_epoch_milliseconds() {
        let now = 1_795_379_959_849;
        assert_eq!(parse_since("1700000000000", now), Ok(1_700_000_000_000));
        assert_eq!(parse_since("90s", now), Ok(now - 90_000));
        assert_eq!(parse_since("30m", now), Ok(now - 1_800_000));
        assert_eq!(parse_since("1h", now), Ok(now - 3_600_000));
        assert_eq!(parse_since(" 2d ", now), Ok(now - 172_800_000));
        assert_eq!(parse_since("1w", now), Ok(now - 604_800_000));
        assert_eq!(parse_since("0h", now), Ok(now));
        assert_eq!(parse_since("100000w", now), Ok(0), "before the epoch is the epoch");
        assert_eq!(parse_since("2026-11-22", now), Ok(1_795_305_600_000));
        assert_eq!(parse_since("2026-11-22T20:39", now), Ok(1_795_379_940_000));
        for bad in ["", "h", "1y", "-1h", "1.5h", "yesterday", "2026-11-31", "99999999999999999999"] {
            assert!(parse_since(bad, now).is_err(), "{bad:?}");
        }
        assert!(parse_since("99999999999999999w", now).is_err());
    }
}
