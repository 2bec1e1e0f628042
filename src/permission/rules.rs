//! Permission rules (`docs/protocol.md#7-permission-rules`): validating a rule a client posts, and deciding which rule, if any,
//! answers a permission request. Everything here is a pure function of its arguments; the caller owns
//! the per-session rule list (kept in insertion order, oldest first) and any locking around it.
//!
//! Path matching is lexical: request paths are normalised (`.`/`..` folded) but symlinks are not
//! resolved, because the agent runs the tool itself and may see a different filesystem state than we
//! would at match time. The agent's own `fs/*` calls are confined separately, by the agent floor;
//! both fold `..` with [`crate::path::normalize_lexically`].

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A POST beyond this many rules on one session is refused: matching is linear in the rule count and
/// every rule is re-sent in each `policy_updated` event.
pub const MAX_RULES_PER_SESSION: usize = 256;
/// Entries per `kinds`/`tools`/`paths`/`commands` list; far more than a hand-written rule needs.
pub const MAX_MATCHERS_PER_FIELD: usize = 64;
/// Bytes per matcher string: PATH_MAX on Linux, so any real path can be remembered literally.
pub const MAX_MATCHER_LEN: usize = 4096;
/// Wildcards in one rule's `paths` and `commands` together (each `*`, `?`, `[` and member of a
/// class, `{` and `,` of an alternation). Counted before anything is compiled: the
/// compiled automaton grows with them, and globset gives up only after building it (64 globs of
/// 4000 `*` took 200 MB that the allocator kept). A hand-written rule holds a handful; 256 compile
/// in a few MB.
pub const MAX_WILDCARDS_PER_RULE: usize = 256;
/// Bytes of one rule's globs that hold a wildcard (literal ones, what a remembered decision writes,
/// are matched as strings and not counted): a compiled glob keeps about 50 times its length, so a
/// rule stays under a quarter of a megabyte, and 256 rules under 64 MB.
pub const MAX_WILDCARD_GLOB_BYTES_PER_RULE: usize = 4096;
/// The most distinct voters a `require` rule may ask for: more than any team approves anything with.
pub const MAX_RULE_QUORUM: u64 = 16;
/// Characters of a `require` rule's `group`: the longest group name a person is kept with
/// (`devices::MAX_CLAIM_CHARS`), so a longer one could never have a member.
pub const MAX_GROUP_CHARS: usize = 256;
/// The ACP `ToolKind` values a `kinds` matcher may name.
pub const TOOL_KINDS: [&str; 9] =
    ["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"];

/// Why a rule could not be added or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The reason is for the client (`400 invalid_rule`).
    #[error("{0}")]
    Invalid(String),
    #[error("rule not found")]
    NotFound,
    /// A workspace rule's write (or removal) the store did not take: nothing changed.
    #[error("{0}")]
    Store(crate::store::WriteError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Allow,
    Deny,
    /// A rule only: what it matches is decided by `quorum` distinct voters' approval (of members of
    /// its `group`, if it names one), whatever the session's policy
    /// (`docs/protocol.md#7-permission-rules`). A vote is never `require`.
    Require,
}

/// The wire object, as GET/POST return it (camelCase, absent fields omitted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub rule_id: String,
    pub effect: Effect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// As the client wrote them (relative globs stay relative here; they are anchored when compiled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<Vec<String>>,
    /// `require` only: how many distinct voters must approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<u64>,
    /// `require` only: the group (of a signed-in person's provider's `groups` claim) whose
    /// members' approvals alone count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
}

/// A validated rule with its globs compiled once, so matching a request never re-parses a pattern.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub rule: Rule,
    paths: Option<GlobSet>,
    commands: Option<GlobSet>,
}

impl CompiledRule {
    /// Whether every present matcher of this rule matches the request.
    pub fn matches(&self, facts: &RequestFacts, workspace: &Path) -> bool {
        self.matches_normalized(facts, &normalized_request_paths(facts, workspace))
    }

    fn matches_normalized(&self, facts: &RequestFacts, paths: &[PathBuf]) -> bool {
        let rule = &self.rule;
        if let Some(kinds) = &rule.kinds
            && !facts.kind.as_ref().is_some_and(|kind| kinds.contains(kind))
        {
            return false;
        }
        if let Some(tools) = &rule.tools
            && !facts.tool.as_ref().is_some_and(|tool| tools.contains(tool))
        {
            return false;
        }
        // A request without paths never satisfies a paths matcher: "every path matches" would be
        // vacuously true and silently widen the rule to path-less tools.
        if let Some(globs) = &self.paths
            && (paths.is_empty() || !paths.iter().all(|path| globs.is_match(path)))
        {
            return false;
        }
        if let Some(globs) = &self.commands
            && !facts.command.as_ref().is_some_and(|command| globs.is_match(command))
        {
            return false;
        }
        true
    }
}

/// Parses and validates a POST body (a rule without `ruleId`/`createdAt`; unknown fields ignored).
///
/// `Err` carries a human reason for `400 invalid_rule`.
pub fn parse_rule(
    body: &Value,
    workspace: &Path,
    created_by: Option<String>,
    now_ms: u64,
) -> Result<CompiledRule, String> {
    let Some(body) = body.as_object() else {
        return Err("a rule must be a JSON object".into());
    };
    let effect = match body.get("effect").and_then(Value::as_str) {
        Some("allow") => Effect::Allow,
        Some("deny") => Effect::Deny,
        Some("require") => Effect::Require,
        _ => return Err("`effect` must be \"allow\", \"deny\" or \"require\"".into()),
    };
    // Their types here; whether they belong and are in range, in `compile`, as for a stored rule.
    let group = match body.get("group") {
        None => None,
        Some(g) => {
            Some(g.as_str().ok_or("`group` must be a string: the name of a group of people")?.to_owned())
        }
    };
    let quorum = match (body.get("quorum"), &group) {
        // A rule that names a group asks one of its members unless it says how many; a quorum is
        // written down, so the stored rule reads back the same whatever the default becomes.
        (None, Some(_)) if effect == Effect::Require => Some(1),
        (None, _) => None,
        (Some(q), _) => Some(q.as_u64().ok_or_else(quorum_range)?),
    };
    let kinds = matcher_list(body, "kinds")?;
    if let Some(unknown) = kinds.iter().flatten().find(|kind| !TOOL_KINDS.contains(&kind.as_str())) {
        return Err(format!("unknown tool kind {unknown:?}; expected one of {}", TOOL_KINDS.join(", ")));
    }
    let rule = Rule {
        rule_id: new_rule_id(),
        effect,
        kinds,
        tools: matcher_list(body, "tools")?,
        paths: matcher_list(body, "paths")?,
        commands: matcher_list(body, "commands")?,
        quorum,
        group,
        created_by,
        created_at: now_ms,
    };
    if rule.kinds.is_none() && rule.tools.is_none() && rule.paths.is_none() && rule.commands.is_none() {
        return Err("a rule needs at least one of kinds, tools, paths, commands; \
                    a rule matching every request is not allowed"
            .into());
    }
    compile(rule, workspace)
}

/// What a permission request offers to match on, extracted once from the ACP `toolCall` object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestFacts {
    pub kind: Option<String>,
    pub tool: Option<String>,
    pub paths: Vec<String>,
    pub command: Option<String>,
}

impl RequestFacts {
    /// Reads `kind`, `_meta.toolName` (else `title`), `locations[].path` and `rawInput.command`.
    ///
    /// The agent may send any shape; a field of the wrong type counts as absent.
    pub fn from_tool_call(tool_call: &Value) -> Self {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let non_empty = |value: Option<&Value>| text(value).filter(|s| !s.is_empty());
        let paths = tool_call
            .get("locations")
            .and_then(Value::as_array)
            .map(|locations| locations.iter().filter_map(|l| text(l.get("path"))).collect())
            .unwrap_or_default();
        Self {
            kind: text(tool_call.get("kind")),
            tool: non_empty(tool_call.pointer("/_meta/toolName")).or_else(|| text(tool_call.get("title"))),
            paths,
            command: text(tool_call.pointer("/rawInput/command")),
        }
    }
}

/// The rule that answers this request: the oldest matching deny, else the oldest matching require,
/// else the oldest matching allow (a rule that asks for people is never waved through by an allow).
///
/// `rules` must be in insertion order; a deny wins regardless of where it sits.
pub fn find_match<'a>(
    rules: &'a [CompiledRule],
    facts: &RequestFacts,
    workspace: &Path,
) -> Option<&'a CompiledRule> {
    find_match_in(rules, &[], facts, workspace)
}

/// [`find_match`] over the session's rules followed by the workspace's: the oldest matching deny of
/// either, else the oldest matching require, else the oldest matching allow, the session's rules
/// first in each case.
pub fn find_match_in<'a>(
    session: &'a [CompiledRule],
    workspace_rules: &'a [CompiledRule],
    facts: &RequestFacts,
    workspace: &Path,
) -> Option<&'a CompiledRule> {
    let paths = normalized_request_paths(facts, workspace);
    let first = |effect| {
        session
            .iter()
            .chain(workspace_rules)
            .find(|r| r.rule.effect == effect && r.matches_normalized(facts, &paths))
    };
    first(Effect::Deny).or_else(|| first(Effect::Require)).or_else(|| first(Effect::Allow))
}

/// A rule read back from the store (its wire object, as [`Rule`] serialises), compiled for
/// `workspace`; `None` if it no longer validates.
pub fn from_stored(rule: &Value, workspace: &Path) -> Option<CompiledRule> {
    let rule: Rule = serde_json::from_value(rule.clone()).ok()?;
    compile(rule, workspace).ok()
}

/// The `optionId` a rule's decision maps to, chosen by the option's kind, never by id or position.
///
/// Deny → `reject_once`, else `reject_always`; allow → `allow_once`, else `allow_always`. `None` means
/// deny answers `cancelled` and allow does not apply (the request goes to the vote); a require
/// rule picks nothing (people do).
pub fn pick_option(options: &[Value], effect: Effect) -> Option<String> {
    let (once, always) = match effect {
        Effect::Allow => ("allow_once", "allow_always"),
        Effect::Deny => ("reject_once", "reject_always"),
        Effect::Require => return None,
    };
    option_id_of_kind(options, once).or_else(|| option_id_of_kind(options, always))
}

/// The `optionId` for the `{"decision": ...}` shorthand: only the `*_once` kinds qualify, because a
/// shorthand vote remembers only when the client asked for it (`-session`), never implicitly.
pub fn pick_shorthand(options: &[Value], effect: Effect) -> Option<String> {
    option_id_of_kind(options, if effect == Effect::Allow { "allow_once" } else { "reject_once" })
}

/// The kind (`allow_once`, ...) of the offered option with this id.
pub fn option_kind<'a>(options: &'a [Value], option_id: &str) -> Option<&'a str> {
    options
        .iter()
        .find(|o| o.get("optionId").and_then(Value::as_str) == Some(option_id))
        .and_then(|o| o.get("kind").and_then(Value::as_str))
}

fn option_id_of_kind(options: &[Value], kind: &str) -> Option<String> {
    options
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
        .find_map(|o| o.get("optionId").and_then(Value::as_str).map(str::to_owned))
}

/// The narrowest rule matching this request ("remember for this session"): same kind, same tool,
/// the exact paths as literal globs, the exact command as a literal glob.
///
/// `None` when the request has nothing to narrow on, or when a fact cannot be written as a valid
/// matcher (an unknown kind, an over-long path, too many paths): remembering a broader rule than the
/// one the user decided would be worse than remembering nothing.
pub fn remembered_rule(
    facts: &RequestFacts,
    effect: Effect,
    workspace: &Path,
    created_by: Option<String>,
    now_ms: u64,
) -> Option<CompiledRule> {
    if facts.kind.as_deref().is_some_and(|kind| !TOOL_KINDS.contains(&kind)) {
        return None;
    }
    let paths: Vec<String> = normalized_request_paths(facts, workspace)
        .iter()
        .map(|path| path.to_str().map(escape_literal))
        .collect::<Option<_>>()?;
    let rule = Rule {
        rule_id: new_rule_id(),
        effect,
        kinds: facts.kind.clone().map(|kind| vec![kind]),
        tools: facts.tool.clone().map(|tool| vec![tool]),
        paths: (!paths.is_empty()).then_some(paths),
        commands: facts.command.as_deref().map(|command| vec![escape_literal(command)]),
        quorum: None,
        group: None,
        created_by,
        created_at: now_ms,
    };
    let fields = [&rule.kinds, &rule.tools, &rule.paths, &rule.commands];
    if fields.iter().all(|field| field.is_none()) {
        return None;
    }
    let valid = |list: &Vec<String>| {
        list.len() <= MAX_MATCHERS_PER_FIELD
            && list.iter().all(|m| !m.is_empty() && m.len() <= MAX_MATCHER_LEN)
    };
    if !fields.iter().copied().flatten().all(valid) {
        return None;
    }
    compile(rule, workspace).ok()
}

fn new_rule_id() -> String {
    format!("rule-{}", uuid::Uuid::new_v4())
}

/// A matcher field: absent or null → `None`; otherwise a non-empty, bounded array of non-empty strings.
fn matcher_list(body: &Map<String, Value>, field: &str) -> Result<Option<Vec<String>>, String> {
    let items = match body.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(format!("`{field}` must be an array of strings")),
    };
    // An empty list would match nothing, which is never what a client means; omitting the field
    // (match any) is the other plausible reading, so neither is guessed.
    if items.is_empty() {
        return Err(format!("`{field}` is empty; omit it to match any value"));
    }
    if items.len() > MAX_MATCHERS_PER_FIELD {
        return Err(format!("`{field}` has {} entries; at most {MAX_MATCHERS_PER_FIELD}", items.len()));
    }
    items
        .iter()
        .map(|item| match item.as_str() {
            Some("") => Err(format!("`{field}` contains an empty string")),
            Some(s) if s.len() > MAX_MATCHER_LEN => {
                Err(format!("`{field}` has an entry over {MAX_MATCHER_LEN} bytes"))
            }
            Some(s) => Ok(s.to_owned()),
            None => Err(format!("`{field}` must contain only strings")),
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// A `require` rule's group: a name a provider's `groups` claim could list and a card can show.
fn valid_group(group: &str, effect: Effect) -> Result<(), String> {
    if effect != Effect::Require {
        return Err("`group` belongs to a `require` rule only".into());
    }
    if group.is_empty() {
        return Err("`group` is empty; name the group whose members must approve".into());
    }
    if group.chars().count() > MAX_GROUP_CHARS {
        return Err(format!("`group` is over {MAX_GROUP_CHARS} characters"));
    }
    // It is shown on every card and terminal: no line breaks, escapes or other controls.
    if group.chars().any(char::is_control) {
        return Err("`group` contains a control character".into());
    }
    Ok(())
}

fn quorum_range() -> String {
    format!("`quorum` must be a whole number from 1 to {MAX_RULE_QUORUM}")
}

fn compile(rule: Rule, workspace: &Path) -> Result<CompiledRule, String> {
    // Posted or read back from the store: a `require` rule without a quorum in range is no rule.
    match (rule.effect, rule.quorum) {
        (Effect::Require, Some(1..=MAX_RULE_QUORUM)) | (Effect::Allow | Effect::Deny, None) => {}
        (Effect::Require, Some(_)) => return Err(quorum_range()),
        (Effect::Require, None) => {
            return Err("a `require` rule needs `quorum`: how many distinct voters must approve".into());
        }
        (Effect::Allow | Effect::Deny, Some(_)) => {
            return Err("`quorum` belongs to a `require` rule only".into());
        }
    }
    if let Some(group) = &rule.group {
        valid_group(group, rule.effect)?;
    }
    within_glob_budget(&rule)?;
    let paths = match &rule.paths {
        Some(globs) => Some(glob_set(globs, true, |glob| anchor_path_glob(glob, workspace))?),
        None => None,
    };
    let commands = match &rule.commands {
        Some(globs) => Some(glob_set(globs, false, |glob| Ok(glob.to_owned()))?),
        None => None,
    };
    Ok(CompiledRule { rule, paths, commands })
}

/// Refuses, before any glob is compiled, a rule whose globs exceed [`MAX_WILDCARDS_PER_RULE`] or
/// [`MAX_WILDCARD_GLOB_BYTES_PER_RULE`].
fn within_glob_budget(rule: &Rule) -> Result<(), String> {
    let globs = rule.paths.iter().chain(&rule.commands).flatten();
    let (mut count, mut bytes) = (0, 0);
    for glob in globs {
        let n = wildcards(glob);
        count += n;
        if n > 0 {
            bytes += glob.len();
        }
    }
    if count > MAX_WILDCARDS_PER_RULE {
        return Err(format!(
            "`paths` and `commands` hold {count} wildcards; a rule may hold at most {MAX_WILDCARDS_PER_RULE}"
        ));
    }
    if bytes > MAX_WILDCARD_GLOB_BYTES_PER_RULE {
        return Err(format!(
            "the globs with wildcards of this rule are {bytes} bytes long; at most {MAX_WILDCARD_GLOB_BYTES_PER_RULE}"
        ));
    }
    Ok(())
}

/// The wildcards of one glob, as [`MAX_WILDCARDS_PER_RULE`] counts them; a backslash-escaped
/// character is a literal (as [`escape_literal`] writes them).
fn wildcards(glob: &str) -> usize {
    let mut count = 0;
    let mut braces = 0usize;
    let mut class = false;
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
            count += usize::from(class);
            continue;
        }
        if class {
            class = c != ']';
            count += usize::from(class);
            continue;
        }
        match c {
            // Each star: globset makes a run of them as many repetitions.
            '*' => count += 1,
            '?' => count += 1,
            '[' => {
                count += 1;
                class = true;
                // A `]` right after `[` or `[!` is a member, not the end.
                chars.next_if_eq(&'!');
                if chars.next_if_eq(&']').is_some() {
                    count += 1;
                }
            }
            '{' => {
                count += 1;
                braces += 1;
            }
            '}' => braces = braces.saturating_sub(1),
            ',' if braces > 0 => count += 1,
            _ => {}
        }
    }
    count
}

/// `literal_separator` is on for paths (`*` stays within one directory, `**` crosses) and off for
/// commands (`*` matches anything, slashes and spaces included). Backslash escaping is set explicitly
/// because [`escape_literal`] relies on it.
fn glob_set(
    globs: &[String],
    literal_separator: bool,
    prepare: impl Fn(&str) -> Result<String, String>,
) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        let pattern = prepare(glob)?;
        let compiled = GlobBuilder::new(&pattern)
            .literal_separator(literal_separator)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("invalid glob {glob:?}: {e}"))?;
        set.add(compiled);
    }
    set.build().map_err(|e| format!("invalid globs: {e}"))
}

/// Makes a path glob absolute: a relative glob is joined to the (escaped) workspace. `.` segments are
/// dropped; `..` is refused because request paths are normalised before matching, so a glob that
/// climbs would silently never match.
fn anchor_path_glob(glob: &str, workspace: &Path) -> Result<String, String> {
    let mut segments = Vec::new();
    for segment in glob.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(format!("path glob {glob:?} contains `..`; write the absolute glob instead")),
            segment => segments.push(segment),
        }
    }
    let base = if glob.starts_with('/') {
        String::new()
    } else {
        let workspace = workspace.to_str().ok_or("relative path globs need a UTF-8 workspace path")?;
        escape_literal(workspace.trim_end_matches('/'))
    };
    Ok(format!("{base}/{}", segments.join("/")))
}

/// Escapes every glob metacharacter (backslash included, which `globset::escape` leaves alone) so
/// the result matches exactly `text`.
fn escape_literal(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '?' | '*' | '[' | ']' | '{' | '}' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The request's paths that fall outside `workspace` (made absolute and normalised as rules see
/// them): where the daemon refuses the agent's `fs/*` reads and writes whatever is decided, so
/// every door marks the request (`outsideWorkspace`, `docs/protocol.md` § 8). Folding `..` the
/// way `fs/*` does ([`crate::path`]), a path this calls inside is one `fs/*` resolves beneath the
/// workspace too, and one it calls outside is one `fs/*` refuses.
pub fn outside_workspace(facts: &RequestFacts, workspace: &Path) -> Vec<String> {
    let root = crate::path::normalize_lexically(workspace);
    let mut outside: Vec<String> = normalized_request_paths(facts, workspace)
        .into_iter()
        .filter(|p| !p.starts_with(&root))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    outside.dedup();
    outside
}

/// Request paths made absolute (relative ones are joined to the workspace) and normalised
/// lexically, so `/ws/src/../../etc/passwd` is matched as `/etc/passwd`, not as something in `/ws`.
fn normalized_request_paths(facts: &RequestFacts, workspace: &Path) -> Vec<PathBuf> {
    facts.paths.iter().map(|path| crate::path::normalize_lexically(&workspace.join(path))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WS: &str = "/ws";

    fn rule(body: Value) -> CompiledRule {
        match parse_rule(&body, Path::new(WS), None, 0) {
            Ok(rule) => rule,
            Err(reason) => panic!("{body} rejected: {reason}"),
        }
    }

    fn facts(tool_call: Value) -> RequestFacts {
        RequestFacts::from_tool_call(&tool_call)
    }

    fn matches(rule_body: Value, tool_call: Value) -> bool {
        rule(rule_body).matches(&facts(tool_call), Path::new(WS))
    }

    #[test]
    fn paths_outside_the_workspace_are_found_as_fs_would_resolve_them() {
        let outside = |paths: &[&str]| {
            let locations: Vec<Value> = paths.iter().map(|p| json!({"path": p})).collect();
            outside_workspace(&facts(json!({"locations": locations})), Path::new(WS))
        };
        assert_eq!(outside(&[]), Vec::<String>::new());
        assert_eq!(outside(&["/ws/a.txt", "b/c.txt", "/ws", "/ws/x/../y"]), Vec::<String>::new());
        assert_eq!(outside(&["/ws/../outside.txt"]), ["/outside.txt"]);
        assert_eq!(
            outside(&["../outside.txt", "/ws/in.txt", "/etc/passwd"]),
            ["/outside.txt", "/etc/passwd"]
        );
        // A sibling whose name starts with the workspace's is not inside it.
        assert_eq!(outside(&["/wsx/a.txt"]), ["/wsx/a.txt"]);
        assert_eq!(outside(&["/ws/a/../../etc", "/ws/a/../../etc"]), ["/etc"]);
    }

    fn check_table(table: &[(Value, Value, bool)]) {
        for (rule_body, tool_call, expected) in table {
            assert_eq!(
                matches(rule_body.clone(), tool_call.clone()),
                *expected,
                "rule {rule_body} vs toolCall {tool_call}"
            );
        }
    }

    /// [`check_table`] for one rule, against tool calls at one location each: (path, matched).
    fn check_paths(rule_body: Value, table: &[(&str, bool)]) {
        let rows: Vec<(Value, Value, bool)> = table
            .iter()
            .map(|&(path, expected)| (rule_body.clone(), json!({"locations": [{"path": path}]}), expected))
            .collect();
        check_table(&rows);
    }

    #[test]
    fn kinds_match_the_tool_call_kind() {
        check_table(&[
            (json!({"effect": "allow", "kinds": ["read"]}), json!({"kind": "read"}), true),
            (json!({"effect": "allow", "kinds": ["read", "search"]}), json!({"kind": "search"}), true),
            (json!({"effect": "allow", "kinds": ["read"]}), json!({"kind": "edit"}), false),
            (json!({"effect": "allow", "kinds": ["read"]}), json!({}), false),
            (json!({"effect": "allow", "kinds": ["read"]}), json!({"kind": 7}), false),
        ]);
    }

    #[test]
    fn tools_match_meta_tool_name_else_title() {
        check_table(&[
            (json!({"effect": "allow", "tools": ["Bash"]}), json!({"_meta": {"toolName": "Bash"}}), true),
            (json!({"effect": "allow", "tools": ["Bash"]}), json!({"title": "Bash"}), true),
            // toolName wins over title when both are present.
            (
                json!({"effect": "allow", "tools": ["Bash"]}),
                json!({"_meta": {"toolName": "Edit"}, "title": "Bash"}),
                false,
            ),
            (
                json!({"effect": "allow", "tools": ["Bash"]}),
                json!({"_meta": {"toolName": 3}, "title": "Bash"}),
                true,
            ),
            (json!({"effect": "allow", "tools": ["Bash"]}), json!({"title": "bash"}), false),
            (json!({"effect": "allow", "tools": ["Bash"]}), json!({"title": "Bash run"}), false),
            (json!({"effect": "allow", "tools": ["Bash"]}), json!({}), false),
        ]);
    }

    #[test]
    fn absolute_path_globs_match_absolute_request_paths() {
        check_paths(
            json!({"effect": "allow", "paths": ["/etc/*.conf"]}),
            &[("/etc/a.conf", true), ("/etc/a.txt", false), ("/ws/etc/a.conf", false)],
        );
    }

    #[test]
    fn relative_path_globs_are_anchored_at_the_workspace() {
        check_paths(
            json!({"effect": "allow", "paths": ["src/**"]}),
            &[
                ("/ws/src/main.rs", true),
                ("src/main.rs", true),
                ("./src/main.rs", true),
                ("/other/src/main.rs", false),
                // Lexical `..` cannot smuggle an outside path past a workspace glob.
                ("/ws/src/../../etc/passwd", false),
            ],
        );
        check_paths(json!({"effect": "allow", "paths": ["./*.md"]}), &[("/ws/README.md", true)]);
    }

    #[test]
    fn workspace_metacharacters_are_literal_when_anchoring() {
        let workspace = Path::new("/home/u/proj[1]");
        let compiled = parse_rule(&json!({"effect": "allow", "paths": ["*.rs"]}), workspace, None, 0);
        let compiled = compiled.expect("valid rule");
        let at = |path: &str| compiled.matches(&facts(json!({"locations": [{"path": path}]})), workspace);
        assert!(at("/home/u/proj[1]/a.rs"));
        assert!(!at("/home/u/proj1/a.rs"));
    }

    #[test]
    fn single_star_stays_in_one_directory_and_double_star_crosses() {
        let star = json!({"effect": "allow", "paths": ["/ws/*.rs"]});
        check_paths(star, &[("/ws/a.rs", true), ("/ws/src/a.rs", false)]);
        let double = json!({"effect": "allow", "paths": ["/ws/**/*.rs"]});
        check_paths(double, &[("/ws/a.rs", true), ("/ws/src/deep/a.rs", true)]);
    }

    #[test]
    fn every_request_path_must_match_a_paths_rule() {
        let rule_body = json!({"effect": "allow", "paths": ["/ws/src/**", "/ws/docs/**"]});
        check_table(&[
            (rule_body.clone(), json!({"locations": [{"path": "/ws/src/a"}, {"path": "/ws/docs/b"}]}), true),
            (
                rule_body.clone(),
                json!({"locations": [{"path": "/ws/src/a"}, {"path": "/etc/passwd"}]}),
                false,
            ),
        ]);
    }

    #[test]
    fn a_request_without_paths_does_not_match_a_paths_rule() {
        let rule_body = json!({"effect": "deny", "paths": ["**"]});
        check_table(&[
            (rule_body.clone(), json!({"kind": "execute"}), false),
            (rule_body.clone(), json!({"locations": []}), false),
            (rule_body.clone(), json!({"locations": "nope"}), false),
            (rule_body.clone(), json!({"locations": [{"line": 3}]}), false),
        ]);
    }

    #[test]
    fn command_globs_match_across_spaces_and_slashes() {
        let rule_body = json!({"effect": "allow", "commands": ["git status*", "cargo * --release"]});
        check_table(&[
            (rule_body.clone(), json!({"rawInput": {"command": "git status"}}), true),
            (rule_body.clone(), json!({"rawInput": {"command": "git status --short src/"}}), true),
            (rule_body.clone(), json!({"rawInput": {"command": "cargo build -p x/y --release"}}), true),
            (rule_body.clone(), json!({"rawInput": {"command": "git push"}}), false),
            (rule_body.clone(), json!({"rawInput": {"command": ["git", "status"]}}), false),
            (rule_body.clone(), json!({}), false),
        ]);
    }

    #[test]
    fn every_present_matcher_must_match() {
        let rule_body = json!({"effect": "allow", "kinds": ["execute"], "commands": ["ls*"]});
        check_table(&[
            (rule_body.clone(), json!({"kind": "execute", "rawInput": {"command": "ls -l"}}), true),
            (rule_body.clone(), json!({"kind": "read", "rawInput": {"command": "ls -l"}}), false),
            (rule_body.clone(), json!({"kind": "execute", "rawInput": {"command": "rm -rf"}}), false),
        ]);
    }

    #[test]
    fn deny_wins_over_allow_regardless_of_order() {
        let request = facts(json!({"kind": "execute", "title": "Bash"}));
        let allow = rule(json!({"effect": "allow", "kinds": ["execute"]}));
        let deny = rule(json!({"effect": "deny", "tools": ["Bash"]}));
        for rules in [vec![allow.clone(), deny.clone()], vec![deny.clone(), allow.clone()]] {
            let found = find_match(&rules, &request, Path::new(WS)).map(|r| r.rule.rule_id.as_str());
            assert_eq!(found, Some(deny.rule.rule_id.as_str()));
        }
    }

    /// A deny beats a require, which beats an allow, wherever each sits; a require rule reads back
    /// as written and picks no option.
    #[test]
    fn a_require_rule_beats_an_allow_and_yields_to_a_deny() {
        let request =
            facts(json!({"kind": "execute", "title": "Bash", "rawInput": {"command": "git push -f"}}));
        let allow = rule(json!({"effect": "allow", "kinds": ["execute"]}));
        let require = rule(json!({"effect": "require", "quorum": 2, "commands": ["git push*"]}));
        let deny = rule(json!({"effect": "deny", "tools": ["Bash"]}));
        let found =
            |rules: &[CompiledRule]| find_match(rules, &request, Path::new(WS)).map(|r| r.rule.effect);
        assert_eq!(found(&[allow.clone(), require.clone()]), Some(Effect::Require));
        assert_eq!(found(&[require.clone(), allow.clone()]), Some(Effect::Require));
        assert_eq!(found(&[allow.clone(), require.clone(), deny.clone()]), Some(Effect::Deny));
        let (session, workspace) = ([allow.clone()], [require.clone()]);
        let in_both = find_match_in(&session, &workspace, &request, Path::new(WS));
        assert_eq!(in_both.map(|r| r.rule.effect), Some(Effect::Require), "the session's allow yields too");
        assert_eq!(require.rule.quorum, Some(2));
        let wire = serde_json::to_value(&require.rule).expect("wire");
        assert_eq!((wire["effect"].clone(), wire["quorum"].clone()), (json!("require"), json!(2)));
        assert_eq!(from_stored(&wire, Path::new(WS)).map(|r| r.rule), Some(require.rule.clone()));
        // A stored rule is checked as a posted one: a quorum out of range, missing, or on another
        // effect, and the rule does not load.
        for quorum in [json!(0), json!(17), Value::Null] {
            let mut stored = wire.clone();
            stored["quorum"] = quorum.clone();
            assert!(from_stored(&stored, Path::new(WS)).is_none(), "quorum {quorum}");
        }
        let mut allow = serde_json::to_value(&allow.rule).expect("wire");
        allow["quorum"] = json!(2);
        assert!(from_stored(&allow, Path::new(WS)).is_none(), "an allow rule with a quorum");
        let options =
            [json!({"optionId": "a", "kind": "allow_once"}), json!({"optionId": "r", "kind": "reject_once"})];
        assert_eq!(pick_option(&options, Effect::Require), None);
    }

    #[test]
    fn oldest_rule_wins_among_equals() {
        let request = facts(json!({"kind": "read", "title": "Read"}));
        for effect in ["allow", "deny"] {
            let rules = vec![
                rule(json!({"effect": effect, "kinds": ["edit"]})),
                rule(json!({"effect": effect, "kinds": ["read"]})),
                rule(json!({"effect": effect, "tools": ["Read"]})),
            ];
            let found = find_match(&rules, &request, Path::new(WS)).map(|r| r.rule.rule_id.as_str());
            assert_eq!(found, Some(rules[1].rule.rule_id.as_str()), "{effect}");
        }
        assert!(find_match(&[], &request, Path::new(WS)).is_none());
    }

    /// A `require` rule may name a group: its quorum defaults to one member, is kept when given,
    /// and the group reads back from the wire and the store; a stored rule whose group no longer
    /// validates does not load.
    #[test]
    fn a_require_rule_may_name_a_group_of_people() {
        let ws = Path::new(WS);
        let one = rule(json!({"effect": "require", "group": "admins", "commands": ["rm -rf*"]}));
        assert_eq!((one.rule.quorum, one.rule.group.as_deref()), (Some(1), Some("admins")));
        let two = rule(json!({"effect": "require", "quorum": 2, "group": "admins", "commands": ["rm -rf*"]}));
        assert_eq!((two.rule.quorum, two.rule.group.as_deref()), (Some(2), Some("admins")));
        let longest = "é".repeat(MAX_GROUP_CHARS);
        let edge = rule(json!({"effect": "require", "group": longest, "commands": ["x"]}));
        assert_eq!(edge.rule.group, Some(longest), "256 characters, 512 bytes");
        let anyone = rule(json!({"effect": "require", "quorum": 2, "commands": ["x"]}));
        assert_eq!(anyone.rule.group, None);
        assert!(
            !serde_json::to_value(&anyone.rule)
                .expect("wire")
                .as_object()
                .expect("object")
                .contains_key("group")
        );

        let wire = serde_json::to_value(&one.rule).expect("wire");
        assert_eq!((wire["group"].clone(), wire["quorum"].clone()), (json!("admins"), json!(1)));
        assert_eq!(from_stored(&wire, ws).map(|r| r.rule), Some(one.rule.clone()));
        for group in [json!(""), json!("a\u{1b}[2J"), json!(7), json!("x".repeat(MAX_GROUP_CHARS + 1))] {
            let mut stored = wire.clone();
            stored["group"] = group.clone();
            assert!(from_stored(&stored, ws).is_none(), "group {group}");
        }
        let mut allow =
            serde_json::to_value(&rule(json!({"effect": "allow", "commands": ["x"]})).rule).expect("wire");
        allow["group"] = json!("admins");
        assert!(from_stored(&allow, ws).is_none(), "an allow rule with a group");
        // The default is the poster's: a stored rule says its quorum.
        let mut unsaid = wire;
        unsaid.as_object_mut().expect("object").remove("quorum");
        assert!(from_stored(&unsaid, ws).is_none(), "a stored require rule without a quorum");
    }

    #[test]
    fn invalid_rules_are_rejected_with_a_reason() {
        let table = [
            (json!([]), "object"),
            (json!({"kinds": ["read"]}), "effect"),
            (json!({"effect": "maybe", "kinds": ["read"]}), "effect"),
            (json!({"effect": "allow"}), "at least one"),
            (json!({"effect": "allow", "kinds": null}), "at least one"),
            (json!({"effect": "allow", "kinds": []}), "empty"),
            (json!({"effect": "allow", "kinds": ["read", "write"]}), "unknown tool kind"),
            (json!({"effect": "allow", "kinds": "read"}), "array"),
            (json!({"effect": "allow", "tools": [1]}), "strings"),
            (json!({"effect": "allow", "tools": [""]}), "empty string"),
            (json!({"effect": "allow", "paths": ["src/[a"]}), "invalid glob"),
            (json!({"effect": "allow", "commands": ["{a,b"]}), "invalid glob"),
            (json!({"effect": "allow", "paths": ["../other/*"]}), ".."),
            (json!({"effect": "allow", "tools": vec!["t"; MAX_MATCHERS_PER_FIELD + 1]}), "at most"),
            (json!({"effect": "allow", "tools": ["x".repeat(MAX_MATCHER_LEN + 1)]}), "bytes"),
            (json!({"effect": "require", "commands": ["git push*"]}), "needs `quorum`"),
            (json!({"effect": "require", "quorum": 0, "commands": ["git push*"]}), "from 1 to 16"),
            (json!({"effect": "require", "quorum": 17, "commands": ["git push*"]}), "from 1 to 16"),
            (json!({"effect": "require", "quorum": "2", "commands": ["git push*"]}), "whole number"),
            (json!({"effect": "require", "quorum": 1.5, "commands": ["git push*"]}), "whole number"),
            (json!({"effect": "allow", "quorum": 2, "commands": ["git push*"]}), "`require` rule only"),
            (json!({"effect": "require", "quorum": 2}), "at least one"),
            (json!({"effect": "require", "group": "admins"}), "at least one"),
            (json!({"effect": "require", "commands": ["x"], "group": 7}), "`group` must be a string"),
            (json!({"effect": "require", "commands": ["x"], "group": null}), "`group` must be a string"),
            (json!({"effect": "require", "commands": ["x"], "group": ""}), "`group` is empty"),
            (json!({"effect": "require", "commands": ["x"], "group": "a\nb"}), "control character"),
            (json!({"effect": "require", "commands": ["x"], "group": "a\u{7f}"}), "control character"),
            (
                json!({"effect": "require", "commands": ["x"], "group": "é".repeat(257)}),
                "over 256 characters",
            ),
            (json!({"effect": "require", "commands": ["x"], "group": "a", "quorum": 0}), "from 1 to 16"),
            (json!({"effect": "allow", "commands": ["x"], "group": "admins"}), "`require` rule only"),
            (json!({"effect": "deny", "commands": ["x"], "group": "admins"}), "`group` belongs to"),
        ];
        for (body, needle) in table {
            match parse_rule(&body, Path::new(WS), None, 0) {
                Ok(_) => panic!("{body} accepted"),
                Err(reason) => assert!(reason.contains(needle), "{body}: {reason:?} lacks {needle:?}"),
            }
        }
    }

    /// Issue #27, finding 17: 64 globs of 4000 `*` used to be compiled before globset gave up (200
    /// MB the allocator kept). They are refused by count, before compiling anything.
    #[test]
    fn globs_past_the_wildcard_budget_are_refused_before_compiling() {
        let stars = vec!["*".repeat(4000); MAX_MATCHERS_PER_FIELD];
        for field in ["paths", "commands"] {
            let body = json!({"effect": "allow", field: stars.clone()});
            let reason = parse_rule(&body, Path::new(WS), None, 0).expect_err("refused");
            assert_eq!(
                reason, "`paths` and `commands` hold 256000 wildcards; a rule may hold at most 256",
                "{field}"
            );
        }
        let reason = parse_rule(
            &json!({"effect": "allow", "paths": ["?".repeat(230)], "commands": ["[abcdefghijklmnopqrstuvwxyz]*"]}),
            Path::new(WS),
            None,
            0,
        )
        .expect_err("refused");
        assert!(reason.contains("hold 258 wildcards"), "both fields count: {reason}");
    }

    #[test]
    fn wildcards_are_counted_as_the_glob_syntax_reads_them() {
        let table = [
            ("plain/path.rs", 0),
            ("a*b", 1),
            ("**/x/**", 4),
            ("*?*", 3),
            ("x[abc]y", 4),
            ("[!a]", 2),
            ("[]a]", 3),
            ("[!]a]", 3),
            ("{a,b,c}", 3),
            ("a,b", 0),
            ("{a,{b,c}},d", 4),
            (r"\*\?\[a\]\{b,c\}", 0),
            (r"[\]]", 2),
            ("git push *", 1),
        ];
        for (glob, expected) in table {
            assert_eq!(wildcards(glob), expected, "{glob}");
        }
    }

    /// The budgets are inclusive, and literal globs (what a remembered decision writes) take none
    /// of the byte budget.
    #[test]
    fn globs_at_the_exact_budget_are_accepted() {
        let count = |globs: Vec<String>| {
            parse_rule(&json!({"effect": "allow", "commands": globs}), Path::new(WS), None, 0)
        };
        let exact = vec!["*".repeat(MAX_WILDCARDS_PER_RULE / 4); 4];
        assert!(count(exact).is_ok(), "256 wildcards");
        let over =
            vec!["*".repeat(MAX_WILDCARDS_PER_RULE / 4), "?".repeat(MAX_WILDCARDS_PER_RULE * 3 / 4 + 1)];
        assert!(count(over).expect_err("refused").contains("257 wildcards"));
        let long = |len: usize| format!("*{}", "x".repeat(len - 1));
        assert!(count(vec![long(2048), long(2048)]).is_ok(), "4096 bytes of wildcard globs");
        let reason = count(vec![long(2048), long(2049)]).expect_err("refused");
        assert_eq!(reason, "the globs with wildcards of this rule are 4097 bytes long; at most 4096");
        let literal = vec!["x".repeat(MAX_MATCHER_LEN); 8];
        assert!(count(literal).is_ok(), "literal globs are not counted");
        let escaped = vec![format!("{}\\*", "x".repeat(MAX_MATCHER_LEN - 2)); 8];
        assert!(count(escaped).is_ok(), "nor escaped wildcards");
    }

    /// The bounds are inclusive: exactly 64 entries and an entry of exactly 4096 bytes are accepted.
    #[test]
    fn matchers_at_their_exact_limits_are_accepted() {
        let tools: Vec<String> = (0..MAX_MATCHERS_PER_FIELD).map(|i| format!("t{i}")).collect();
        let wide = parse_rule(&json!({"effect": "allow", "tools": tools}), Path::new(WS), None, 0);
        assert_eq!(wide.expect("64 entries").rule.tools.map(|t| t.len()), Some(MAX_MATCHERS_PER_FIELD));
        let long = "x".repeat(MAX_MATCHER_LEN);
        let rule = parse_rule(&json!({"effect": "allow", "commands": [long]}), Path::new(WS), None, 0);
        assert!(
            rule.expect("4096 bytes").matches(&facts(json!({"rawInput": {"command": long}})), Path::new(WS))
        );
    }

    /// A remembered rule obeys the limits a posted one does, inclusive: paths up to 64 of them and up
    /// to 4096 bytes each are remembered literally; past either, or with an empty matcher, nothing is.
    #[test]
    fn a_remembered_rule_is_valid_up_to_the_matcher_limits() {
        let ws = Path::new(WS);
        let with_paths = |paths: Vec<String>| {
            let locations: Vec<Value> = paths.iter().map(|p| json!({"path": p})).collect();
            facts(json!({"kind": "edit", "title": "Write", "locations": locations}))
        };
        let many = |n: usize| (0..n).map(|i| format!("/ws/f{i}")).collect::<Vec<_>>();
        let at_limit = remembered_rule(&with_paths(many(MAX_MATCHERS_PER_FIELD)), Effect::Allow, ws, None, 0);
        assert_eq!(at_limit.expect("64 paths").rule.paths.map(|p| p.len()), Some(MAX_MATCHERS_PER_FIELD));
        assert!(
            remembered_rule(&with_paths(many(MAX_MATCHERS_PER_FIELD + 1)), Effect::Allow, ws, None, 0)
                .is_none()
        );

        let long = |len: usize| format!("/ws/{}", "a".repeat(len - "/ws/".len()));
        let exact = remembered_rule(&with_paths(vec![long(MAX_MATCHER_LEN)]), Effect::Allow, ws, None, 0);
        assert_eq!(exact.expect("4096 bytes").rule.paths, Some(vec![long(MAX_MATCHER_LEN)]));
        assert!(
            remembered_rule(&with_paths(vec![long(MAX_MATCHER_LEN + 1)]), Effect::Allow, ws, None, 0)
                .is_none()
        );

        let untitled = facts(json!({"kind": "edit", "title": ""}));
        assert!(remembered_rule(&untitled, Effect::Allow, ws, None, 0).is_none(), "an empty tool name");
    }

    #[test]
    fn parsed_rule_round_trips_as_the_wire_object() {
        let body = json!({"effect": "deny", "paths": ["src/*"], "ruleId": "mine", "extra": 1});
        let compiled = parse_rule(&body, Path::new(WS), Some("cli-1".into()), 42).expect("valid rule");
        assert!(compiled.rule.rule_id.starts_with("rule-"));
        let wire = serde_json::to_value(&compiled.rule).expect("serialises");
        let id = compiled.rule.rule_id.clone();
        assert_eq!(
            wire,
            json!({"ruleId": id, "effect": "deny", "paths": ["src/*"], "createdBy": "cli-1", "createdAt": 42})
        );
        assert_eq!(serde_json::from_value::<Rule>(wire).ok(), Some(compiled.rule));
    }

    #[test]
    fn facts_tolerate_any_shape() {
        for odd in [json!(null), json!(3), json!("x"), json!([]), json!({"rawInput": "ls", "_meta": []})] {
            assert_eq!(facts(odd), RequestFacts::default());
        }
        let full = facts(json!({
            "kind": "edit", "title": "Edit file", "_meta": {"toolName": "Edit"},
            "locations": [{"path": "/ws/a"}, {"path": 5}, {"path": "b"}],
            "rawInput": {"command": "x"}
        }));
        let expected = RequestFacts {
            kind: Some("edit".into()),
            tool: Some("Edit".into()),
            paths: vec!["/ws/a".into(), "b".into()],
            command: Some("x".into()),
        };
        assert_eq!(full, expected);
    }

    #[test]
    fn pick_option_chooses_by_kind_not_id_or_position() {
        let options = [
            json!({"optionId": "zz-9", "name": "Always", "kind": "allow_always"}),
            json!({"optionId": "0", "name": "Never", "kind": "reject_always"}),
            json!({"optionId": "allow_once", "name": "No", "kind": "reject_once"}),
            json!({"optionId": "reject_once", "name": "Yes", "kind": "allow_once"}),
        ];
        let only = |kinds: &[&str]| -> Vec<Value> {
            options.iter().filter(|o| kinds.contains(&o["kind"].as_str().unwrap_or(""))).cloned().collect()
        };
        let table: [(Vec<Value>, Effect, Option<&str>); 8] = [
            (options.to_vec(), Effect::Allow, Some("reject_once")),
            (options.to_vec(), Effect::Deny, Some("allow_once")),
            (only(&["allow_always", "reject_always"]), Effect::Allow, Some("zz-9")),
            (only(&["allow_always", "reject_always"]), Effect::Deny, Some("0")),
            (only(&["reject_once", "reject_always"]), Effect::Allow, None),
            (only(&["allow_once", "allow_always"]), Effect::Deny, None),
            (vec![json!({"optionId": 1, "kind": "allow_once"}), json!("junk")], Effect::Allow, None),
            (vec![], Effect::Deny, None),
        ];
        for (offered, effect, expected) in table {
            assert_eq!(pick_option(&offered, effect).as_deref(), expected, "{effect:?} from {offered:?}");
        }
    }

    #[test]
    fn pick_shorthand_accepts_only_once_kinds() {
        let always = [
            json!({"optionId": "a", "kind": "allow_always"}),
            json!({"optionId": "r", "kind": "reject_always"}),
        ];
        assert_eq!(pick_shorthand(&always, Effect::Allow), None);
        assert_eq!(pick_shorthand(&always, Effect::Deny), None);
        let once = [
            json!({"optionId": "r1", "kind": "reject_once"}),
            json!({"optionId": "a1", "kind": "allow_once"}),
        ];
        assert_eq!(pick_shorthand(&once, Effect::Allow).as_deref(), Some("a1"));
        assert_eq!(pick_shorthand(&once, Effect::Deny).as_deref(), Some("r1"));
    }

    #[test]
    fn option_kind_looks_up_by_id() {
        let options = [json!({"optionId": "x", "kind": "allow_once"}), json!({"optionId": "y"})];
        assert_eq!(option_kind(&options, "x"), Some("allow_once"));
        assert_eq!(option_kind(&options, "y"), None);
        assert_eq!(option_kind(&options, "z"), None);
    }

    #[test]
    fn remembered_rule_matches_the_request_and_not_a_sibling() {
        let original = json!({
            "kind": "edit", "_meta": {"toolName": "Edit"},
            "locations": [{"path": "src/lib.rs"}], "rawInput": {"command": "sed -i s/a/b/ *.rs"}
        });
        let remembered = remembered_rule(&facts(original.clone()), Effect::Allow, Path::new(WS), None, 7);
        let remembered = remembered.expect("narrow rule");
        assert_eq!(remembered.rule.kinds, Some(vec!["edit".to_owned()]));
        assert_eq!(remembered.rule.paths, Some(vec!["/ws/src/lib.rs".to_owned()]));
        let ws = Path::new(WS);
        assert!(remembered.matches(&facts(original.clone()), ws));
        let mut sibling = original.clone();
        sibling["locations"] = json!([{"path": "/ws/src/main.rs"}]);
        assert!(!remembered.matches(&facts(sibling), ws));
        let mut other_command = original.clone();
        other_command["rawInput"]["command"] = json!("sed -i s/a/b/ main.rs");
        assert!(!remembered.matches(&facts(other_command), ws));
        let mut other_kind = original;
        other_kind["kind"] = json!("delete");
        assert!(!remembered.matches(&facts(other_kind), ws));
    }

    #[test]
    fn remembered_paths_escape_glob_metacharacters() {
        let ws = Path::new(WS);
        for name in ["a[1].txt", "b*.txt", "c?.txt", "{d,e}.txt", "f\\g.txt", "h!.txt"] {
            let original = facts(json!({"locations": [{"path": format!("/ws/{name}")}]}));
            let remembered = remembered_rule(&original, Effect::Deny, ws, None, 0).expect("narrow rule");
            assert!(remembered.matches(&original, ws), "{name}");
            for sibling in ["a1.txt", "bx.txt", "cx.txt", "d.txt", "fg.txt", "f\\\\g.txt", "h.txt"] {
                let sibling = facts(json!({"locations": [{"path": format!("/ws/{sibling}")}]}));
                assert!(!remembered.matches(&sibling, ws), "{name} matched {sibling:?}");
            }
        }
    }

    #[test]
    fn remembered_rule_needs_something_narrow_and_expressible() {
        let ws = Path::new(WS);
        assert!(remembered_rule(&RequestFacts::default(), Effect::Allow, ws, None, 0).is_none());
        let unknown_kind = facts(json!({"kind": "switch_mode", "title": "Mode"}));
        assert!(remembered_rule(&unknown_kind, Effect::Allow, ws, None, 0).is_none());
        let title_only = facts(json!({"title": "Fetch"}));
        let remembered = remembered_rule(&title_only, Effect::Deny, ws, Some("c".into()), 0);
        let remembered = remembered.expect("narrow rule");
        assert_eq!(remembered.rule.tools, Some(vec!["Fetch".to_owned()]));
        assert_eq!(remembered.rule.created_by.as_deref(), Some("c"));
        assert_eq!(remembered.rule.kinds, None);
    }
}
