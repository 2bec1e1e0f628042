//! The agent's configured secrets (the values of its `env` in the config file: API keys, tokens)
//! kept out of what the daemon repeats of the agent's diagnostics. A crashing agent prints its
//! environment, a failing one puts its key in an error message; those words reach the log, the
//! `turn_error` event every observer reads, notifications and HTTP answers. Every path they take
//! starts here: the stderr forwarder (the log and the tail that exit messages quote), the agent's
//! JSON-RPC error answers, and the reasons its malformed lines are skipped.
//!
//! A model reviewer's request is redacted here too (`crate::review`): what an agent's tool call
//! says is sent to a model only without the secrets of any agent's environment.
//!
//! The agent's own output — its messages, tool calls, `initialize` answer — is its content and
//! passes as it is: an agent that chooses to say its key says it (and a client can ask it to, as
//! the `env` directive of the demo agent does).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use crate::acp::RpcError;

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";
/// Values shorter than this are not treated as secrets: `1`, `true`, `en_US` or a short role name
/// would be "redacted" out of every line that mentions them, and no key or token is that short.
pub(crate) const MIN_SECRET_LEN: usize = 8;

/// How well-known API keys and tokens start (OpenAI and Anthropic, GitHub, GitLab, Slack, AWS,
/// Google, Hugging Face, npm, PyPI): a word starting so and at least [`MIN_TOKEN_LEN`] long is
/// taken for a token when a redactor also redacts token shapes ([`Redactor::and_token_shapes`]).
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "AKIA",
    "AIza",
    "hf_",
    "npm_",
    "pypi-",
];
/// The shortest word taken for a token by its prefix: the real ones are 20 to 200 characters,
/// and a shorter word starting so (`sk-learn`, `hf_hub`) is a name.
const MIN_TOKEN_LEN: usize = 20;

/// The secrets of one agent, longest first (so a secret holding another is replaced whole).
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Arc<[String]>,
    /// Whether words shaped like a well-known token are redacted too (what goes to a model
    /// reviewer); diagnostics redact only the configured values.
    shapes: bool,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("secrets", &self.secrets.len()).finish()
    }
}

impl Redactor {
    /// The secrets of an agent's `env`: each value (each line of a multi-line one) of at least
    /// [`MIN_SECRET_LEN`] characters.
    pub(crate) fn new(env: &[(String, String)]) -> Redactor {
        let mut secrets: Vec<String> = env
            .iter()
            .flat_map(|(_, value)| value.split('\n'))
            .map(|s| s.trim_end_matches('\r'))
            .filter(|s| s.chars().count() >= MIN_SECRET_LEN)
            .map(str::to_owned)
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets: secrets.into(), shapes: false }
    }

    /// This redactor, redacting also every word shaped like a well-known token
    /// ([`TOKEN_PREFIXES`]): a key the agent found in a file, which no configuration names.
    pub(crate) fn and_token_shapes(self) -> Redactor {
        Redactor { shapes: true, ..self }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        if self.shapes
            && let Some(clean) = without_token_shapes(&out)
        {
            out = Cow::Owned(clean);
        }
        out
    }

    /// [`Redactor::redact`] for text that was cut short: a secret cut at its end leaves a prefix
    /// of itself there, which is redacted too.
    pub(crate) fn redact_cut<'a>(&self, text: &'a str) -> Cow<'a, str> {
        // The longest proper prefix of any secret that ends the text, found before anything is
        // replaced (a shorter secret inside it would hide it).
        let cut = self
            .secrets
            .iter()
            .filter_map(|secret| {
                (1..secret.len())
                    .rev()
                    .filter(|&n| secret.is_char_boundary(n))
                    .find(|&n| text.ends_with(&secret[..n]))
            })
            .max();
        match cut {
            Some(n) => Cow::Owned(format!("{}{REDACTED}", self.redact(&text[..text.len() - n]))),
            None => self.redact(text),
        }
    }

    /// An agent's JSON-RPC error, its message and every string of its `data` redacted.
    pub(crate) fn rpc_error(&self, mut error: RpcError) -> RpcError {
        if self.secrets.is_empty() {
            return error;
        }
        if let Cow::Owned(message) = self.redact(&error.message) {
            error.message = message;
        }
        if let Some(data) = &mut error.data {
            self.redact_value(data);
        }
        error
    }

    /// Every string in `value` redacted (a model reviewer's request, `crate::review`).
    pub(crate) fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.redact(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.redact_value(v)),
            _ => {}
        }
    }
}

/// `text` with each word shaped like a token replaced, or `None` when it holds none. A word is a
/// run of `A-Z a-z 0-9 _ -` (what keys are made of).
fn without_token_shapes(text: &str) -> Option<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut out = String::with_capacity(text.len());
    let (mut rest, mut found) = (text, false);
    while let Some(start) = rest.find(is_word) {
        out.push_str(&rest[..start]);
        let word_end = rest[start..].find(|c: char| !is_word(c)).map_or(rest.len(), |n| start + n);
        let word = &rest[start..word_end];
        if word.len() >= MIN_TOKEN_LEN && TOKEN_PREFIXES.iter().any(|p| word.starts_with(p)) {
            out.push_str(REDACTED);
            found = true;
        } else {
            out.push_str(word);
        }
        rest = &rest[word_end..];
    }
    out.push_str(rest);
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const KEY: &str = "sk-live-0123456789abcdef";

    fn redactor() -> Redactor {
        Redactor::new(&[
            ("API_KEY".into(), KEY.into()),
            ("ROLE".into(), "writer".into()),
            ("PEM".into(), "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkq\n-----END KEY-----".into()),
            ("PREFIX".into(), "sk-live-0123".into()),
        ])
    }

    #[test]
    fn every_configured_value_long_enough_is_replaced_wherever_it_appears() {
        let r = redactor();
        assert_eq!(
            r.redact(&format!("auth failed for {KEY}; retry with {KEY}")),
            "auth failed for [redacted]; retry with [redacted]"
        );
        assert_eq!(r.redact("the writer role"), "the writer role", "short values are no secrets");
        assert_eq!(
            r.redact("got MIIEvQIBADANBgkq back"),
            "got [redacted] back",
            "each line of a multi-line value"
        );
        assert_eq!(r.redact("-----BEGIN KEY----- x"), "[redacted] x", "a line's \\r is no part of it");
        assert_eq!(r.redact(KEY), "[redacted]", "the longer secret wins over its prefix");
        assert_eq!(r.redact("sk-live-0123 alone"), "[redacted] alone");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(Redactor::default().redact(KEY), KEY);
        assert_eq!(Redactor::new(&[("A".into(), "1234567".into())]).redact("1234567"), "1234567");
        assert_eq!(Redactor::new(&[("A".into(), "12345678".into())]).redact("x12345678"), "x[redacted]");
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 5 }", "its Debug shows how many, not one of them");
    }

    #[test]
    fn words_shaped_like_tokens_are_redacted_only_when_asked() {
        let shapes = Redactor::default().and_token_shapes();
        let token = "ghp_0123456789abcdefABCDEF";
        assert_eq!(
            shapes.redact(&format!("git push https://{token}@host x")),
            "git push https://[redacted]@host x"
        );
        assert_eq!(shapes.redact("export KEY=sk-ant-api03-abcdefghij;"), "export KEY=[redacted];");
        assert_eq!(
            shapes.redact("pip install sk-learn hf_hub"),
            "pip install sk-learn hf_hub",
            "names, too short"
        );
        assert_eq!(
            shapes.redact("ask-0123456789abcdefghij"),
            "ask-0123456789abcdefghij",
            "a prefix starts the word"
        );
        assert_eq!(shapes.redact("sk-0123456789abcdefg"), "[redacted]", "twenty is enough");
        assert_eq!(shapes.redact("sk-0123456789abcdef"), "sk-0123456789abcdef", "nineteen is not");
        assert!(matches!(shapes.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(Redactor::default().redact(token), token, "diagnostics redact only configured values");
        let both = Redactor::new(&[("K".into(), "plain-secret".into())]).and_token_shapes();
        assert_eq!(both.redact(&format!("plain-secret {token}")), "[redacted] [redacted]");
    }

    #[test]
    fn a_secret_cut_at_the_end_of_a_cut_text_is_redacted_too() {
        let r = redactor();
        assert_eq!(r.redact_cut("key=sk-live-0123456"), "key=[redacted]");
        assert_eq!(r.redact_cut("key=s"), "key=[redacted]");
        assert_eq!(r.redact_cut(&format!("{KEY} then sk-li")), "[redacted] then [redacted]");
        assert_eq!(r.redact_cut("ends in x"), "ends in x");
        assert_eq!(
            r.redact("key=sk-live-0123456"),
            "key=[redacted]456",
            "a whole text keeps what is no secret"
        );
    }

    #[test]
    fn an_agents_error_answer_is_redacted_in_its_message_and_data() {
        let error = RpcError {
            code: -32603,
            message: format!("invalid key {KEY}"),
            data: Some(json!({"details": format!("key {KEY}"), "list": [KEY, 1], "n": null})),
        };
        let clean = redactor().rpc_error(error);
        assert_eq!(clean.message, "invalid key [redacted]");
        assert_eq!(
            clean.data,
            Some(json!({"details": "key [redacted]", "list": ["[redacted]", 1], "n": null}))
        );
        assert_eq!(clean.code, -32603);
    }
}
