//! What an agent asks a person beside a permission (`docs/protocol.md#19-questions`): Qwen Code's
//! `ask_user_question` (a `session/request_permission` whose `toolCall._meta` says
//! `qwenInteractionKind: "user_question"` and lists `qwenQuestions`), and ACP's `elicitation/create`
//! (a form of primitive fields, or a URL the person opens).
//!
//! Pure, like the policy: a [`Question`] is parsed once, within bounds, from what the agent sent;
//! the answers a person gives are checked against it and converted to the field's type (strings
//! from the qwen SDK become integers, numbers, booleans, choices) or refused naming the field; the
//! agent gets its own keys back. The mediator keeps a question as a pending request like any other
//! (`super::mediator`); the doors show it from [`Question::wire`] (and `/acp` from
//! [`Question::elicitation`]).
//!
//! The agent is never trusted: every text, count and URL it sends is bounded here, a URL must be
//! `http` or `https` and is shown with its host, and answers to fields that look secret are kept
//! out of the audit and the events ([`Question::redacted`]).

use serde_json::{Map, Value, json};

/// The answers a ballot carries, by field key, as the client sent them.
pub type Answers = Map<String, Value>;

/// Fields (questions) one request may ask. Qwen Code asks 1 to 4; an MCP-style form a person fills
/// on a phone has a handful. 32 leaves room and keeps a card, a notification and an audit entry
/// small.
pub const MAX_FIELDS: usize = 32;
/// Choices one field may offer (qwen offers 2 to 4).
pub const MAX_CHOICES: usize = 32;
/// A field's key (qwen's `answerKey`, a form's property name).
pub const MAX_KEY_BYTES: usize = 128;
/// Any text the agent shows a person (a message, a title, a question, a choice's label or
/// description): a screenful.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;
/// A URL elicitation's URL.
pub const MAX_URL_BYTES: usize = 4 * 1024;
/// One answer: what a person types in one field (also each item of a multiple choice).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// What an answer to a sensitive field reads as in the audit and in every event.
pub const REDACTED: &str = "[redacted]";

/// The option ids of an elicitation's two buttons (an elicitation offers none of its own): the
/// mediator decides on options, and these map back to ACP's `accept` and `decline`.
pub const ACCEPT_OPTION_ID: &str = "accept";
pub const DECLINE_OPTION_ID: &str = "decline";

/// How the agent asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Qwen Code's `ask_user_question`, inside a `session/request_permission`.
    Qwen,
    /// ACP `elicitation/create`, form mode.
    Elicitation,
    /// ACP `elicitation/create`, URL mode: a link for the person to open.
    Url,
}

impl Form {
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Qwen => "user_question",
            Form::Elicitation => "form",
            Form::Url => "url",
        }
    }
}

/// A URL the agent asks a person to open, and the host it goes to (what the person is shown
/// first, so `https://bank.example@evil.example/` reads as `evil.example`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub url: String,
    pub host: String,
}

/// One choice of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// What the answer holds (a form's `const` or enum value; a qwen option's label).
    pub value: String,
    pub label: String,
    pub description: String,
}

/// What a field takes.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    Text {
        min_len: Option<u64>,
        max_len: Option<u64>,
    },
    Integer {
        min: Option<f64>,
        max: Option<f64>,
    },
    Number {
        min: Option<f64>,
        max: Option<f64>,
    },
    Boolean,
    /// One of `offers`, or (`other`) any text (qwen's "Other").
    One {
        offers: Vec<Offer>,
        other: bool,
    },
    /// Any of `offers` (`other`: texts of one's own too), between `min_items` and `max_items`.
    Many {
        offers: Vec<Offer>,
        other: bool,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
}

impl FieldKind {
    fn as_str(&self) -> &'static str {
        match self {
            FieldKind::Text { .. } => "text",
            FieldKind::Integer { .. } => "integer",
            FieldKind::Number { .. } => "number",
            FieldKind::Boolean => "boolean",
            FieldKind::One { .. } | FieldKind::Many { .. } => "choice",
        }
    }
}

/// One field of a form, or one of qwen's questions.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The agent's own key: qwen's `answerKey` (its index, unless it named one), a form's property.
    pub key: String,
    /// A short label (qwen's `header`, a property's `title`, else its key).
    pub title: String,
    /// The question itself (qwen's `question`, a property's `description`).
    pub text: String,
    pub kind: FieldKind,
    pub required: bool,
    /// Its answer is a secret: kept out of the audit and every event ([`REDACTED`]).
    pub sensitive: bool,
    pub default: Option<Value>,
}

/// What the agent asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub form: Form,
    /// What the person reads first (an elicitation's `message`, qwen's tool title).
    pub message: String,
    pub fields: Vec<Field>,
    /// A URL elicitation's link.
    pub link: Option<Link>,
    /// A URL elicitation's id, as the agent chose it (what its `elicitation/complete` names). Never
    /// shown to clients, which know the question by its request id.
    pub elicitation_id: Option<String>,
}

/// Why the agent's question is refused (it is answered with an error, or `cancelled`, and is
/// pending nowhere).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// Why a person's answers are refused; the question stays pending.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("answer to {field}: {reason}")]
pub struct AnswerError {
    /// The field's key, or the key the client sent that names none.
    pub field: String,
    pub reason: String,
}

fn malformed(why: impl Into<String>) -> Malformed {
    Malformed(why.into())
}

/// A bounded text of the agent's (`what` names it in the refusal); absent is empty.
fn text(v: Option<&Value>, what: &str) -> Result<String, Malformed> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) if s.len() <= MAX_TEXT_BYTES => Ok(s.clone()),
        Some(Value::String(_)) => Err(malformed(format!("{what} is longer than {MAX_TEXT_BYTES} bytes"))),
        Some(_) => Err(malformed(format!("{what} must be a string"))),
    }
}

fn bound(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|n| n.is_finite())
}

fn count(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64)
}

/// Whether a field's name reads like a secret (a password, a token, an API key, a PIN, a one-time
/// code): its answer is redacted even when the schema does not say so.
pub fn secret_like(name: &str) -> bool {
    const WORDS: [&str; 12] = [
        "password",
        "passphrase",
        "passwd",
        "secret",
        "token",
        "apikey",
        "credential",
        "credentials",
        "pin",
        "otp",
        "cvv",
        "privatekey",
    ];
    let lower = name.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let joined = |a: &str, b: &str| format!("{a}{b}");
    words.iter().any(|w| WORDS.contains(w) || w.ends_with("password") || w.ends_with("token"))
        || words.windows(2).any(|p| WORDS.contains(&joined(p[0], p[1]).as_str()))
}

impl Question {
    /// The question in a `session/request_permission`'s `toolCall`, if it is Qwen Code's
    /// `ask_user_question` (`_meta.qwenInteractionKind: "user_question"`); `Err` when it says so
    /// but its questions are not what qwen sends.
    pub fn from_qwen(tool_call: &Value) -> Option<Result<Question, Malformed>> {
        let meta = tool_call.get("_meta")?;
        if meta.get("qwenInteractionKind").and_then(Value::as_str) != Some("user_question") {
            return None;
        }
        Some(Question::parse_qwen(tool_call, meta))
    }

    fn parse_qwen(tool_call: &Value, meta: &Value) -> Result<Question, Malformed> {
        let questions = match meta.get("qwenQuestions") {
            Some(Value::Array(q)) if !q.is_empty() => q,
            _ => return Err(malformed("qwenQuestions must be a non-empty array")),
        };
        if questions.len() > MAX_FIELDS {
            return Err(malformed(format!("{} questions, more than {MAX_FIELDS}", questions.len())));
        }
        let mut fields = Vec::with_capacity(questions.len());
        for (i, q) in questions.iter().enumerate() {
            if !q.is_object() {
                return Err(malformed(format!("question {i} must be an object")));
            }
            let key = match q.get("answerKey") {
                None | Some(Value::Null) => i.to_string(),
                Some(Value::String(k)) => checked_key(k)?,
                Some(_) => return Err(malformed(format!("question {i}: answerKey must be a string"))),
            };
            let offers = match q.get("options") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(o)) if o.len() <= MAX_CHOICES => o
                    .iter()
                    .enumerate()
                    .map(|(j, o)| {
                        let label = text(o.get("label"), &format!("question {i}, option {j}: label"))?;
                        let description =
                            text(o.get("description"), &format!("question {i}, option {j}: description"))?;
                        Ok(Offer { value: label.clone(), label, description })
                    })
                    .collect::<Result<Vec<_>, Malformed>>()?,
                Some(Value::Array(_)) => {
                    return Err(malformed(format!("question {i}: more than {MAX_CHOICES} options")));
                }
                Some(_) => return Err(malformed(format!("question {i}: options must be an array"))),
            };
            let multi = match q.get("multiSelect") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(malformed(format!("question {i}: multiSelect must be a boolean"))),
            };
            let title = text(q.get("header"), &format!("question {i}: header"))?;
            let question = text(q.get("question"), &format!("question {i}: question"))?;
            // Qwen Code always lets a person answer in words of their own ("Other").
            let kind = if multi {
                FieldKind::Many { offers, other: true, min_items: None, max_items: None }
            } else {
                FieldKind::One { offers, other: true }
            };
            let sensitive = secret_like(&title) || secret_like(&question);
            fields.push(Field { key, title, text: question, kind, required: true, sensitive, default: None });
        }
        if has_duplicate_keys(&fields) {
            return Err(malformed("two questions have the same answerKey"));
        }
        let message = text(tool_call.get("title"), "the tool call's title")?;
        Ok(Question { form: Form::Qwen, message, fields, link: None, elicitation_id: None })
    }

    /// The question of an `elicitation/create`'s params (form or URL mode).
    pub fn from_elicitation(params: &Value) -> Result<Question, Malformed> {
        let message = text(params.get("message"), "message")?;
        match params.get("mode").and_then(Value::as_str) {
            Some("form") => {
                let schema = params
                    .get("requestedSchema")
                    .filter(|s| s.is_object())
                    .ok_or_else(|| malformed("a form elicitation needs requestedSchema, an object schema"))?;
                let fields = form_fields(schema)?;
                Ok(Question { form: Form::Elicitation, message, fields, link: None, elicitation_id: None })
            }
            Some("url") => {
                let id = match params.get("elicitationId") {
                    Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_KEY_BYTES => id.clone(),
                    _ => {
                        return Err(malformed(format!(
                            "a URL elicitation needs elicitationId, a string of 1 to {MAX_KEY_BYTES} bytes"
                        )));
                    }
                };
                let url = params.get("url").and_then(Value::as_str).unwrap_or_default();
                let link = link(url)?;
                Ok(Question {
                    form: Form::Url,
                    message,
                    fields: Vec::new(),
                    link: Some(link),
                    elicitation_id: Some(id),
                })
            }
            Some(other) => Err(malformed(format!(
                "elicitation mode {:?} is not supported (form and url are)",
                other.chars().take(64).collect::<String>()
            ))),
            None => Err(malformed("mode must be \"form\" or \"url\"")),
        }
    }

    /// Whether a pending request of this question is answered by an option of `kind` with answers
    /// (an `allow*` option: qwen's "Submit", an elicitation's accept).
    pub fn accepts(kind: &str) -> bool {
        kind.starts_with("allow")
    }

    /// `answers` checked against the fields and converted to their types: what the agent gets
    /// (by its own keys, in the fields' order). A key may also name a field by its index (`"0"`),
    /// as qwen's clients key every question; an unknown key, a missing required answer, a wrong
    /// type or an oversized answer is refused naming the field.
    pub fn check(&self, answers: Option<&Answers>) -> Result<Answers, AnswerError> {
        let empty = Answers::new();
        let answers = answers.unwrap_or(&empty);
        let mut given: Vec<Option<&Value>> = vec![None; self.fields.len()];
        for (key, value) in answers {
            let found = self.fields.iter().position(|f| &f.key == key).or_else(|| {
                key.parse::<usize>().ok().filter(|i| *i < self.fields.len() && i.to_string() == *key)
            });
            let Some(i) = found else {
                let shown: String = key.chars().take(MAX_KEY_BYTES).collect();
                return Err(AnswerError { field: shown, reason: "no such question".into() });
            };
            if given[i].is_some() {
                return Err(refused(&self.fields[i], "answered twice (by its key and by its index)"));
            }
            given[i] = Some(value).filter(|v| !v.is_null());
        }
        let mut out = Answers::new();
        for (field, value) in self.fields.iter().zip(given) {
            match value {
                Some(v) => {
                    if let Some(typed) = convert(field, v)? {
                        out.insert(field.key.clone(), typed);
                    } else if field.required {
                        return Err(refused(field, "an answer is required"));
                    }
                }
                None if field.required => return Err(refused(field, "an answer is required")),
                None => {}
            }
        }
        Ok(out)
    }

    /// Checked answers as the agent takes them: qwen's are strings (several choices joined with
    /// `, `, as its own dialog joins them), a form's keep their types.
    pub fn for_agent(&self, answers: &Answers) -> Value {
        if self.form != Form::Qwen {
            return Value::Object(answers.clone());
        }
        let strings = answers.iter().map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Array(items) => items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
                other => other.to_string(),
            };
            (k.clone(), Value::String(s))
        });
        Value::Object(strings.collect())
    }

    /// Checked answers with those of sensitive fields replaced by [`REDACTED`]: what the audit and
    /// the events keep.
    pub fn redacted(&self, answers: &Answers) -> Value {
        let shown = answers.iter().map(|(k, v)| {
            let secret = self.fields.iter().any(|f| &f.key == k && f.sensitive);
            (k.clone(), if secret { json!(REDACTED) } else { v.clone() })
        });
        Value::Object(shown.collect())
    }

    /// The question as every client reads it (`permission_request.question`).
    pub fn wire(&self) -> Value {
        let mut out = json!({
            "form": self.form.as_str(),
            "message": self.message,
            "fields": self.fields.iter().map(Field::wire).collect::<Vec<_>>(),
        });
        if let Some(link) = &self.link {
            out["url"] = json!(link.url);
            out["host"] = json!(link.host);
        }
        out
    }

    /// What the audit keeps of the question: its form, message, link and each field's key, title and
    /// type (not its choices: the answer says what was chosen).
    pub fn audited(&self) -> Value {
        let mut out = json!({
            "form": self.form.as_str(),
            "message": self.message,
            "fields": self.fields.iter().map(|f| json!({
                "key": f.key, "title": f.title, "type": f.kind.as_str(), "sensitive": f.sensitive,
            })).collect::<Vec<_>>(),
        });
        if let Some(link) = &self.link {
            out["url"] = json!(link.url);
            out["host"] = json!(link.host);
        }
        out
    }

    /// The `toolCall` a client of the qwen wire reads (`permission_request.toolCall`) for an
    /// elicitation: a form's fields as `qwenQuestions` (each with its `answerKey`), a URL as a tool
    /// call whose text names it and its host. `tool_call_id` is the agent's, when it tied the
    /// elicitation to one.
    pub fn tool_call(&self, tool_call_id: Option<&str>) -> Value {
        let mut call = json!({"title": self.message, "status": "pending"});
        if let Some(id) = tool_call_id {
            call["toolCallId"] = json!(id);
        }
        match &self.link {
            Some(link) => {
                call["kind"] = json!("fetch");
                call["content"] = json!([{"type": "content", "content": {"type": "text",
                    "text": format!("Open {} (on {})", link.url, link.host)}}]);
                call["_meta"] = json!({"mediatord/question": self.form.as_str()});
            }
            None => {
                call["kind"] = json!("other");
                call["_meta"] = json!({
                    "qwenInteractionKind": "user_question",
                    "qwenQuestions": self.fields.iter().map(Field::qwen).collect::<Vec<_>>(),
                    "mediatord/question": self.form.as_str(),
                });
            }
        }
        call
    }

    /// The options of an elicitation (it offers none of its own): accept and decline.
    pub fn elicitation_options(&self) -> Vec<Value> {
        let accept = if self.link.is_some() { "Open the link" } else { "Submit" };
        vec![
            json!({"optionId": ACCEPT_OPTION_ID, "name": accept, "kind": "allow_once"}),
            json!({"optionId": DECLINE_OPTION_ID, "name": "Decline", "kind": "reject_once"}),
        ]
    }

    /// The params of the `elicitation/create` the ACP door sends a client that advertised the
    /// capability, for either form of question (qwen's questions become a form): the client knows
    /// it by `request_id`, never by the agent's ids. `None` when the client cannot take it
    /// (`form`/`url`: which modes it advertised).
    pub fn elicitation(&self, session_id: &str, request_id: &str, form: bool, url: bool) -> Option<Value> {
        let meta = json!({"mediatord/requestId": request_id});
        match &self.link {
            Some(link) if url => Some(json!({
                "sessionId": session_id, "mode": "url", "message": self.message,
                "elicitationId": request_id, "url": link.url, "_meta": meta,
            })),
            Some(_) => None,
            None if form => {
                let properties: Map<String, Value> =
                    self.fields.iter().map(|f| (f.key.clone(), f.schema())).collect();
                let required: Vec<&str> =
                    self.fields.iter().filter(|f| f.required).map(|f| f.key.as_str()).collect();
                let message =
                    if self.message.is_empty() { "Please answer".to_owned() } else { self.message.clone() };
                Some(json!({
                    "sessionId": session_id, "mode": "form", "message": message,
                    "requestedSchema": {"type": "object", "properties": properties, "required": required},
                    "_meta": meta,
                }))
            }
            None => None,
        }
    }
}

/// A field key the agent chose, checked.
fn checked_key(key: &str) -> Result<String, Malformed> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(malformed(format!("a field key must be 1 to {MAX_KEY_BYTES} bytes")));
    }
    Ok(key.to_owned())
}

fn has_duplicate_keys(fields: &[Field]) -> bool {
    let mut keys: Vec<&str> = fields.iter().map(|f| f.key.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// A URL the agent asks a person to open: `http` or `https` only (never `javascript:`, `data:`,
/// `file:`), with a host, no credentials in it, within [`MAX_URL_BYTES`].
fn link(url: &str) -> Result<Link, Malformed> {
    if url.is_empty() || url.len() > MAX_URL_BYTES {
        return Err(malformed(format!("url must be 1 to {MAX_URL_BYTES} bytes")));
    }
    let parsed = url::Url::parse(url).map_err(|e| malformed(format!("url is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(malformed(format!(
            "url must be http or https, not {}:",
            parsed.scheme().chars().take(32).collect::<String>()
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(malformed("url must not carry a user name or password"));
    }
    let host =
        parsed.host_str().filter(|h| !h.is_empty()).ok_or_else(|| malformed("url must name a host"))?;
    Ok(Link { url: parsed.to_string(), host: host.to_owned() })
}

/// The fields of a form elicitation's `requestedSchema`: an object of primitive properties.
fn form_fields(schema: &Value) -> Result<Vec<Field>, Malformed> {
    if let Some(t) = schema.get("type")
        && t != "object"
    {
        return Err(malformed("requestedSchema.type must be \"object\""));
    }
    let properties = match schema.get("properties") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(malformed("requestedSchema.properties must be an object")),
    };
    if properties.len() > MAX_FIELDS {
        return Err(malformed(format!("the form has {} fields, more than {MAX_FIELDS}", properties.len())));
    }
    let required: Vec<&str> = match schema.get("required") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err(malformed("requestedSchema.required must be an array of names")),
    };
    let mut fields = Vec::with_capacity(properties.len());
    for (key, property) in properties {
        let key = checked_key(key)?;
        let shown: String = key.chars().take(64).collect();
        let field_error = |why: &str| malformed(format!("field {shown:?}: {why}"));
        if !property.is_object() {
            return Err(field_error("its schema must be an object"));
        }
        let title = text(property.get("title"), &format!("field {shown:?}: title"))?;
        let description = text(property.get("description"), &format!("field {shown:?}: description"))?;
        let kind = match property.get("type").and_then(Value::as_str) {
            Some("string") => match (property.get("enum"), property.get("oneOf")) {
                (_, Some(one_of)) if !one_of.is_null() => {
                    FieldKind::One { offers: titled(one_of, &shown)?, other: false }
                }
                (Some(values), _) if !values.is_null() => {
                    FieldKind::One { offers: untitled(values, &shown)?, other: false }
                }
                _ => FieldKind::Text {
                    min_len: count(property.get("minLength")),
                    max_len: count(property.get("maxLength")),
                },
            },
            Some("integer") => FieldKind::Integer {
                min: bound(property.get("minimum")),
                max: bound(property.get("maximum")),
            },
            Some("number") => {
                FieldKind::Number { min: bound(property.get("minimum")), max: bound(property.get("maximum")) }
            }
            Some("boolean") => FieldKind::Boolean,
            Some("array") => {
                let items = property
                    .get("items")
                    .filter(|i| i.is_object())
                    .ok_or_else(|| field_error("a multiple choice needs items with enum or anyOf"))?;
                let offers = match (items.get("enum"), items.get("anyOf")) {
                    (_, Some(any_of)) if !any_of.is_null() => titled(any_of, &shown)?,
                    (Some(values), _) if !values.is_null() => untitled(values, &shown)?,
                    _ => return Err(field_error("a multiple choice needs items with enum or anyOf")),
                };
                FieldKind::Many {
                    offers,
                    other: false,
                    min_items: count(property.get("minItems")),
                    max_items: count(property.get("maxItems")),
                }
            }
            Some(other) => {
                return Err(field_error(&format!(
                    "type {:?} is not a primitive (string, number, integer, boolean, or an array of choices)",
                    other.chars().take(32).collect::<String>()
                )));
            }
            None => return Err(field_error("it needs a type")),
        };
        let marked = property.get("writeOnly").and_then(Value::as_bool) == Some(true)
            || property.get("format").and_then(Value::as_str) == Some("password")
            || property.pointer("/_meta/sensitive").and_then(Value::as_bool) == Some(true);
        let sensitive = marked || secret_like(&key) || secret_like(&title);
        let mut field = Field {
            title: if title.is_empty() { key.clone() } else { title },
            text: description,
            kind,
            required: required.contains(&key.as_str()),
            sensitive,
            default: None,
            key,
        };
        // A default is shown only if it is an answer the field would take.
        field.default = property.get("default").and_then(|d| convert(&field, d).ok().flatten());
        fields.push(field);
    }
    Ok(fields)
}

/// A form's untitled choices (`enum`).
fn untitled(values: &Value, field: &str) -> Result<Vec<Offer>, Malformed> {
    let Value::Array(values) = values else {
        return Err(malformed(format!("field {field:?}: enum must be an array")));
    };
    if values.is_empty() || values.len() > MAX_CHOICES {
        return Err(malformed(format!("field {field:?}: 1 to {MAX_CHOICES} choices")));
    }
    values
        .iter()
        .map(|v| {
            let value = text(Some(v), &format!("field {field:?}: a choice"))?;
            Ok(Offer { label: value.clone(), value, description: String::new() })
        })
        .collect()
}

/// A form's titled choices (`oneOf`, `anyOf`: `{const, title, description}`).
fn titled(values: &Value, field: &str) -> Result<Vec<Offer>, Malformed> {
    let Value::Array(values) = values else {
        return Err(malformed(format!("field {field:?}: oneOf and anyOf must be arrays")));
    };
    if values.is_empty() || values.len() > MAX_CHOICES {
        return Err(malformed(format!("field {field:?}: 1 to {MAX_CHOICES} choices")));
    }
    values
        .iter()
        .map(|v| {
            let value = text(v.get("const"), &format!("field {field:?}: a choice's const"))?;
            let label = text(v.get("title"), &format!("field {field:?}: a choice's title"))?;
            let description =
                text(v.get("description"), &format!("field {field:?}: a choice's description"))?;
            Ok(Offer { label: if label.is_empty() { value.clone() } else { label }, value, description })
        })
        .collect()
}

fn refused(field: &Field, reason: impl Into<String>) -> AnswerError {
    AnswerError { field: field.key.clone(), reason: reason.into() }
}

/// One answer converted to the field's type: `None` for an empty text (no answer), `Err` naming
/// the field for anything it does not take.
fn convert(field: &Field, v: &Value) -> Result<Option<Value>, AnswerError> {
    let too_long = |s: &str| s.len() > MAX_ANSWER_BYTES;
    if let Value::String(s) = v
        && too_long(s)
    {
        return Err(refused(field, format!("longer than {MAX_ANSWER_BYTES} bytes")));
    }
    let in_range = |n: f64, min: Option<f64>, max: Option<f64>| -> Result<(), AnswerError> {
        match (min, max) {
            (Some(min), _) if n < min => Err(refused(field, format!("{n} is below the minimum {min}"))),
            (_, Some(max)) if n > max => Err(refused(field, format!("{n} is above the maximum {max}"))),
            _ => Ok(()),
        }
    };
    match &field.kind {
        FieldKind::Text { min_len, max_len } => {
            let Value::String(s) = v else { return Err(refused(field, "expected text")) };
            if s.is_empty() {
                return Ok(None);
            }
            let chars = s.chars().count() as u64;
            if min_len.is_some_and(|m| chars < m) || max_len.is_some_and(|m| chars > m) {
                let (lo, hi) = (min_len.unwrap_or(0), max_len.map_or("any".to_owned(), |m| m.to_string()));
                return Err(refused(field, format!("expected {lo} to {hi} characters, got {chars}")));
            }
            Ok(Some(json!(s)))
        }
        FieldKind::Integer { min, max } => {
            let n = match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) if s.trim().is_empty() => return Ok(None),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            };
            let n = n.ok_or_else(|| refused(field, "expected an integer"))?;
            in_range(n as f64, *min, *max)?;
            Ok(Some(json!(n)))
        }
        FieldKind::Number { min, max } => {
            let n = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) if s.trim().is_empty() => return Ok(None),
                Value::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            let n = n.filter(|n| n.is_finite()).ok_or_else(|| refused(field, "expected a number"))?;
            in_range(n, *min, *max)?;
            Ok(Some(json!(n)))
        }
        FieldKind::Boolean => match v {
            Value::Bool(b) => Ok(Some(json!(b))),
            Value::String(s) if s.trim().is_empty() => Ok(None),
            Value::String(s) if s.trim().eq_ignore_ascii_case("true") => Ok(Some(json!(true))),
            Value::String(s) if s.trim().eq_ignore_ascii_case("false") => Ok(Some(json!(false))),
            _ => Err(refused(field, "expected true or false")),
        },
        FieldKind::One { offers, other } => {
            let Value::String(s) = v else { return Err(refused(field, "expected one choice, as text")) };
            if s.trim().is_empty() {
                return Ok(None);
            }
            match offered(offers, s) {
                Some(value) => Ok(Some(json!(value))),
                None if *other => Ok(Some(json!(s))),
                None => Err(refused(field, format!("expected one of {}", listed(offers)))),
            }
        }
        FieldKind::Many { offers, other, min_items, max_items } => {
            let items: Vec<String> = match v {
                Value::Array(items) => {
                    if items.len() > offers.len().max(MAX_CHOICES) {
                        return Err(refused(field, "more choices than there are"));
                    }
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        let Value::String(s) = item else {
                            return Err(refused(field, "expected a list of choices, as text"));
                        };
                        if too_long(s) {
                            return Err(refused(field, format!("longer than {MAX_ANSWER_BYTES} bytes")));
                        }
                        out.push(s.clone());
                    }
                    out
                }
                // One choice whole, or several joined with commas (how qwen's clients send them).
                Value::String(s) if offered(offers, s).is_some() => vec![s.clone()],
                Value::String(s) => {
                    s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect()
                }
                _ => return Err(refused(field, "expected a list of choices")),
            };
            let mut chosen: Vec<String> = Vec::with_capacity(items.len());
            for item in &items {
                let value = match offered(offers, item) {
                    Some(value) => value.to_owned(),
                    None if *other && !item.trim().is_empty() => item.clone(),
                    None => return Err(refused(field, format!("expected choices among {}", listed(offers)))),
                };
                if !chosen.contains(&value) {
                    chosen.push(value);
                }
            }
            let n = chosen.len() as u64;
            if n == 0 && min_items.is_none_or(|m| m == 0) {
                return Ok(None);
            }
            if min_items.is_some_and(|m| n < m) || max_items.is_some_and(|m| n > m) {
                let (lo, hi) =
                    (min_items.unwrap_or(0), max_items.map_or("any".to_owned(), |m| m.to_string()));
                return Err(refused(field, format!("expected {lo} to {hi} choices, got {n}")));
            }
            Ok(Some(json!(chosen)))
        }
    }
}

/// The value of the offer `s` names (by its value, or by its label as qwen's clients send it).
fn offered<'a>(offers: &'a [Offer], s: &str) -> Option<&'a str> {
    offers
        .iter()
        .find(|o| o.value == s)
        .or_else(|| offers.iter().find(|o| o.label == s))
        .map(|o| o.value.as_str())
}

/// The choices, as a refusal lists them (at most a few).
fn listed(offers: &[Offer]) -> String {
    let mut shown: Vec<String> = offers.iter().take(8).map(|o| format!("{:?}", o.value)).collect();
    if offers.len() > 8 {
        shown.push(format!("and {} more", offers.len() - 8));
    }
    shown.join(", ")
}

impl Field {
    /// The field as every client reads it.
    fn wire(&self) -> Value {
        let mut out = json!({
            "key": self.key, "title": self.title, "text": self.text, "type": self.kind.as_str(),
            "required": self.required, "sensitive": self.sensitive,
        });
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                out[k] = v;
            }
        };
        match &self.kind {
            FieldKind::Text { min_len, max_len } => {
                put("minLength", json!(min_len));
                put("maxLength", json!(max_len));
            }
            FieldKind::Integer { min, max } | FieldKind::Number { min, max } => {
                put("minimum", min.map_or(Value::Null, number));
                put("maximum", max.map_or(Value::Null, number));
            }
            FieldKind::Boolean => {}
            FieldKind::One { offers, other } => {
                put("choices", offers_wire(offers));
                put("multiple", json!(false));
                put("other", json!(other));
            }
            FieldKind::Many { offers, other, min_items, max_items } => {
                put("choices", offers_wire(offers));
                put("multiple", json!(true));
                put("other", json!(other));
                put("minItems", json!(min_items));
                put("maxItems", json!(max_items));
            }
        }
        put("default", self.default.clone().unwrap_or(Value::Null));
        out
    }

    /// The field as one of qwen's questions (`qwenQuestions`), with its `answerKey`.
    fn qwen(&self) -> Value {
        let (offers, multi): (&[Offer], bool) = match &self.kind {
            FieldKind::One { offers, .. } => (offers, false),
            FieldKind::Many { offers, .. } => (offers, true),
            // A yes/no question's two options are written below; the rest take any text.
            _ => (&[], false),
        };
        let mut options: Vec<Value> =
            offers.iter().map(|o| json!({"label": o.label, "description": o.description})).collect();
        if self.kind == FieldKind::Boolean {
            options = vec![
                json!({"label": "true", "description": "Yes"}),
                json!({"label": "false", "description": "No"}),
            ];
        }
        let question = if self.text.is_empty() { self.title.clone() } else { self.text.clone() };
        json!({
            "answerKey": self.key, "header": self.title, "question": question,
            "options": options, "multiSelect": multi,
        })
    }

    /// The field as an elicitation form's property schema.
    fn schema(&self) -> Value {
        let mut s = match &self.kind {
            FieldKind::Text { min_len, max_len } => {
                let mut s = json!({"type": "string"});
                if let Some(m) = min_len {
                    s["minLength"] = json!(m);
                }
                if let Some(m) = max_len {
                    s["maxLength"] = json!(m);
                }
                s
            }
            FieldKind::Integer { min, max } | FieldKind::Number { min, max } => {
                let mut s = json!({"type": self.kind_type()});
                if let Some(m) = min {
                    s["minimum"] = number(*m);
                }
                if let Some(m) = max {
                    s["maximum"] = number(*m);
                }
                s
            }
            FieldKind::Boolean => json!({"type": "boolean"}),
            // Qwen's "Other" has no place in a form: the choices are what the agent offered.
            FieldKind::One { offers, .. } if offers.is_empty() => json!({"type": "string"}),
            FieldKind::One { offers, .. } => json!({"type": "string", "oneOf": titled_wire(offers)}),
            FieldKind::Many { offers, min_items, max_items, .. } => {
                let mut s = json!({"type": "array", "items": {"anyOf": titled_wire(offers)}});
                if let Some(m) = min_items {
                    s["minItems"] = json!(m);
                }
                if let Some(m) = max_items {
                    s["maxItems"] = json!(m);
                }
                s
            }
        };
        s["title"] = json!(self.title);
        if !self.text.is_empty() {
            s["description"] = json!(self.text);
        }
        if let Some(d) = &self.default {
            s["default"] = d.clone();
        }
        s
    }

    fn kind_type(&self) -> &'static str {
        match self.kind {
            FieldKind::Integer { .. } => "integer",
            _ => "number",
        }
    }
}

/// A bound as JSON: a whole number as an integer (`9`, not `9.0`: what a schema's reader expects
/// of an integer field, and what the agent sent), any other as it is.
fn number(v: f64) -> Value {
    // 2^53: past it an f64 no longer holds every integer.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.fract() == 0.0 && v.abs() <= EXACT { json!(v as i64) } else { json!(v) }
}

fn offers_wire(offers: &[Offer]) -> Value {
    Value::Array(
        offers
            .iter()
            .map(|o| json!({"value": o.value, "label": o.label, "description": o.description}))
            .collect(),
    )
}

fn titled_wire(offers: &[Offer]) -> Value {
    Value::Array(
        offers
            .iter()
            .map(|o| {
                let mut v = json!({"const": o.value, "title": o.label});
                if !o.description.is_empty() {
                    v["description"] = json!(o.description);
                }
                v
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen_call(questions: Value) -> Value {
        json!({
            "toolCallId": "c1", "title": "Ask user 1 question", "kind": "think",
            "_meta": {"toolName": "ask_user_question", "qwenInteractionKind": "user_question", "qwenQuestions": questions},
        })
    }

    fn library() -> Value {
        json!([{
            "question": "Which library should we use?", "header": "Library", "multiSelect": false,
            "options": [{"label": "chrono", "description": "the classic"}, {"label": "jiff", "description": "newer"}],
        }])
    }

    /// The question of a form elicitation with these `properties` and `required` names.
    fn form(properties: Value, required: &[&str]) -> Result<Question, Malformed> {
        Question::from_elicitation(&json!({
            "sessionId": "s1", "mode": "form", "message": "Tell me more",
            "requestedSchema": {"type": "object", "properties": properties, "required": required},
        }))
    }

    fn answers(v: Value) -> Answers {
        v.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_permission_request_is_a_question_only_when_qwen_says_so() {
        assert!(Question::from_qwen(&json!({"title": "Write"})).is_none());
        assert!(Question::from_qwen(&json!({"_meta": {"toolName": "write_file"}})).is_none());
        let q = Question::from_qwen(&qwen_call(library())).expect("a question").expect("well formed");
        assert_eq!((q.form, q.message.as_str()), (Form::Qwen, "Ask user 1 question"));
        let f = &q.fields[0];
        assert_eq!((f.key.as_str(), f.title.as_str(), f.required), ("0", "Library", true));
        assert_eq!(
            f.kind,
            FieldKind::One {
                offers: vec![
                    Offer {
                        value: "chrono".into(),
                        label: "chrono".into(),
                        description: "the classic".into()
                    },
                    Offer { value: "jiff".into(), label: "jiff".into(), description: "newer".into() },
                ],
                other: true,
            }
        );
        let named = json!([{"answerKey": "lib", "question": "Which?", "header": "L", "options": []}]);
        let q = Question::from_qwen(&qwen_call(named)).expect("q").expect("ok");
        assert_eq!(q.fields[0].key, "lib", "the agent's own key is kept");
    }

    #[test]
    fn a_malformed_qwen_question_is_refused_saying_why() {
        let cases = [
            (json!([]), "non-empty"),
            (json!("x"), "non-empty"),
            (json!([1]), "question 0 must be an object"),
            (json!([{"question": "q", "multiSelect": "yes"}]), "multiSelect must be a boolean"),
            (json!([{"question": {"nested": 1}}]), "question 0: question must be a string"),
            (json!([{"options": "a"}]), "options must be an array"),
            (json!([{"answerKey": "a"}, {"answerKey": "a"}]), "same answerKey"),
            (json!([{"answerKey": ""}]), "1 to 128 bytes"),
            (json!([{"header": "h".repeat(MAX_TEXT_BYTES + 1)}]), "longer than 8192 bytes"),
        ];
        for (questions, why) in cases {
            let err = Question::from_qwen(&qwen_call(questions.clone())).expect("q").expect_err("refused");
            assert!(err.0.contains(why), "{questions}: {err}");
        }
        let many: Vec<Value> = (0..=MAX_FIELDS).map(|_| json!({"question": "q"})).collect();
        let err = Question::from_qwen(&qwen_call(json!(many))).expect("q").expect_err("too many");
        assert_eq!(err.0, "33 questions, more than 32");
        let exactly: Vec<Value> = (0..MAX_FIELDS).map(|_| json!({"question": "q"})).collect();
        assert!(Question::from_qwen(&qwen_call(json!(exactly))).expect("q").is_ok(), "32 is fine");
        let options: Vec<Value> = (0..=MAX_CHOICES).map(|i| json!({"label": i.to_string()})).collect();
        let err = Question::from_qwen(&qwen_call(json!([{"options": options}]))).expect("q").expect_err("x");
        assert_eq!(err.0, "question 0: more than 32 options");
    }

    #[test]
    fn qwen_answers_are_any_text_or_its_choices_and_reach_the_agent_as_strings() {
        let q = Question::from_qwen(&qwen_call(library())).expect("q").expect("ok");
        let checked = q.check(Some(&answers(json!({"0": "jiff"})))).expect("a choice");
        assert_eq!(q.for_agent(&checked), json!({"0": "jiff"}));
        let other = q.check(Some(&answers(json!({"0": "time, by hand"})))).expect("Other");
        assert_eq!(other["0"], "time, by hand");
        let missing = q.check(Some(&answers(json!({})))).expect_err("every question is required");
        assert_eq!(missing, AnswerError { field: "0".into(), reason: "an answer is required".into() });
        assert_eq!(
            q.check(Some(&answers(json!({"0": "  "})))).expect_err("blank").reason,
            "an answer is required"
        );
        assert_eq!(q.check(None).expect_err("none").field, "0");
        let unknown = q.check(Some(&answers(json!({"0": "jiff", "7": "x"})))).expect_err("unknown");
        assert_eq!((unknown.field.as_str(), unknown.reason.as_str()), ("7", "no such question"));
        // The index one past the last question is no question either (one question here: "1").
        let past = q.check(Some(&answers(json!({"0": "jiff", "1": "x"})))).expect_err("one past");
        assert_eq!((past.field.as_str(), past.reason.as_str()), ("1", "no such question"));
        let number = q.check(Some(&answers(json!({"0": 3})))).expect_err("a number is no choice");
        assert_eq!(number.reason, "expected one choice, as text");

        let multi = json!([{"question": "Which?", "header": "F", "multiSelect": true,
            "options": [{"label": "a", "description": ""}, {"label": "b, c", "description": ""}]}]);
        let q = Question::from_qwen(&qwen_call(multi)).expect("q").expect("ok");
        let joined = q.check(Some(&answers(json!({"0": "a, b, c"})))).expect("joined by commas");
        assert_eq!(joined["0"], json!(["a", "b", "c"]), "unknown pieces are Other's words");
        let whole = q.check(Some(&answers(json!({"0": "b, c"})))).expect("a choice with a comma");
        assert_eq!(whole["0"], json!(["b, c"]));
        let list = q.check(Some(&answers(json!({"0": ["b, c", "a", "a"]})))).expect("a list");
        assert_eq!(q.for_agent(&list), json!({"0": "b, c, a"}), "joined for the agent, duplicates once");
    }

    #[test]
    fn a_form_elicitation_takes_primitive_fields_and_refuses_the_rest() {
        let q = form(
            json!({
                "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
                "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
                "ratio": {"type": "number"},
                "ok": {"type": "boolean", "description": "Agree?"},
                "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
                "size": {"type": "string", "enum": ["s", "m"]},
                "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 2},
            }),
            &["name", "age"],
        )
        .expect("a form");
        assert_eq!(q.form, Form::Elicitation);
        let keys: Vec<&str> = q.fields.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(
            keys,
            ["age", "color", "name", "ok", "ratio", "size", "tags"],
            "the schema's order (sorted)"
        );
        assert_eq!(q.fields[0].default, Some(json!(30)));
        assert!(q.fields.iter().filter(|f| f.required).map(|f| &f.key).eq(["age", "name"]));
        let bad = [
            (
                json!({"x": {"type": "object", "properties": {}}}),
                "field \"x\": type \"object\" is not a primitive",
            ),
            (json!({"x": {"type": "array", "items": {"type": "object"}}}), "needs items with enum or anyOf"),
            (json!({"x": {"title": "no type"}}), "field \"x\": it needs a type"),
            (json!({"x": 3}), "its schema must be an object"),
            (json!({"x": {"type": "string", "enum": []}}), "1 to 32 choices"),
        ];
        for (properties, why) in bad {
            let err = form(properties.clone(), &[]).expect_err("refused");
            assert!(err.0.contains(why), "{properties}: {err}");
        }
        let huge: Map<String, Value> =
            (0..10_000).map(|i| (format!("f{i}"), json!({"type": "string"}))).collect();
        let err = form(Value::Object(huge), &[]).expect_err("10 000 fields");
        assert_eq!(err.0, "the form has 10000 fields, more than 32");
        let err =
            Question::from_elicitation(&json!({"mode": "form", "message": "m"})).expect_err("no schema");
        assert!(err.0.contains("requestedSchema"), "{err}");
        let err = Question::from_elicitation(&json!({"mode": "telepathy"})).expect_err("mode");
        assert_eq!(err.0, "elicitation mode \"telepathy\" is not supported (form and url are)");
    }

    #[test]
    fn string_answers_become_the_fields_types_or_are_refused_naming_the_field() {
        let q = form(
            json!({
                "name": {"type": "string", "minLength": 2, "maxLength": 5},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ratio": {"type": "number", "maximum": 1},
                "ok": {"type": "boolean"},
                "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
                "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 1, "maxItems": 2},
            }),
            &["name", "age"],
        )
        .expect("a form");
        let typed = q
            .check(Some(&answers(json!({
                "name": "Ada", "age": " 36 ", "ratio": "0.5", "ok": "TRUE", "color": "Red", "tags": "x, z",
            }))))
            .expect("converted");
        assert_eq!(
            Value::Object(typed.clone()),
            json!({"age": 36, "color": "r", "name": "Ada", "ok": true, "ratio": 0.5, "tags": ["x", "z"]})
        );
        assert_eq!(q.for_agent(&typed), Value::Object(typed.clone()), "a form's keep their types");
        let typed = q
            .check(Some(&answers(json!({"name": "Bo", "age": 7, "ok": false, "tags": ["y"]}))))
            .expect("JSON");
        assert_eq!(Value::Object(typed), json!({"age": 7, "name": "Bo", "ok": false, "tags": ["y"]}));
        let by_index = q.check(Some(&answers(json!({"0": "3", "2": "Bo"})))).expect("keys by index");
        assert_eq!(Value::Object(by_index), json!({"age": 3, "name": "Bo"}), "the agent's own keys back");
        let refusals = [
            (json!({"name": "Bo", "age": "thirty"}), "age", "expected an integer"),
            (json!({"name": "Bo", "age": "3.5"}), "age", "expected an integer"),
            (json!({"name": "Bo", "age": 151}), "age", "151 is above the maximum 150"),
            (json!({"name": "Bo", "age": -1}), "age", "-1 is below the minimum 0"),
            (json!({"name": "B", "age": 1}), "name", "expected 2 to 5 characters, got 1"),
            (json!({"name": "Bo", "age": 1, "ratio": "NaN"}), "ratio", "expected a number"),
            (json!({"name": "Bo", "age": 1, "ok": "maybe"}), "ok", "expected true or false"),
            (json!({"name": "Bo", "age": 1, "color": "Blue"}), "color", "expected one of \"r\", \"g\""),
            (json!({"name": "Bo", "age": 1, "tags": "x, y, z"}), "tags", "expected 1 to 2 choices, got 3"),
            (
                json!({"name": "Bo", "age": 1, "tags": "w"}),
                "tags",
                "expected choices among \"x\", \"y\", \"z\"",
            ),
            (json!({"name": "Bo", "age": 1, "tags": [1]}), "tags", "expected a list of choices, as text"),
            (json!({"name": {"a": 1}, "age": 1}), "name", "expected text"),
            (json!({"age": 1}), "name", "an answer is required"),
            (json!({"name": "Bo", "age": 1, "0": 2}), "age", "answered twice (by its key and by its index)"),
        ];
        for (given, field, reason) in refusals {
            let err = q.check(Some(&answers(given.clone()))).expect_err("refused");
            assert_eq!((err.field.as_str(), err.reason.as_str()), (field, reason), "{given}");
        }
        let big = "x".repeat(MAX_ANSWER_BYTES + 1);
        let err = q.check(Some(&answers(json!({"name": big, "age": 1})))).expect_err("too long");
        assert_eq!(err.reason, "longer than 16384 bytes");
        let open = form(json!({"t": {"type": "string"}}), &[]).expect("q");
        let fits = "x".repeat(MAX_ANSWER_BYTES);
        assert_eq!(
            open.check(Some(&answers(json!({"t": fits.clone()})))).expect("exactly the bound")["t"],
            json!(fits)
        );
        let ten_mib = "x".repeat(10 * 1024 * 1024);
        assert_eq!(open.check(Some(&answers(json!({"t": ten_mib})))).expect_err("10 MiB").field, "t");
        assert_eq!(open.check(None).expect("nothing required"), Answers::new());
    }

    #[test]
    fn a_url_elicitation_is_http_with_a_host_and_nothing_else() {
        let url = |u: &str| json!({"sessionId": "s", "mode": "url", "elicitationId": "e1", "url": u, "message": "Sign in"});
        let q = Question::from_elicitation(&url("https://bank.example:8443/auth?x=1")).expect("https");
        assert_eq!(
            q.link,
            Some(Link { url: "https://bank.example:8443/auth?x=1".into(), host: "bank.example".into() })
        );
        assert_eq!(q.elicitation_id.as_deref(), Some("e1"));
        assert_eq!(q.wire()["host"], "bank.example");
        for (bad, why) in [
            ("javascript:alert(1)", "url must be http or https, not javascript:"),
            ("JavaScript:alert(1)", "url must be http or https, not javascript:"),
            ("data:text/html,<script>", "url must be http or https, not data:"),
            ("file:///etc/passwd", "url must be http or https, not file:"),
            ("https://bank.example@evil.example/", "url must not carry a user name or password"),
            ("not a url", "url is not a URL"),
            ("", "url must be 1 to 4096 bytes"),
        ] {
            let err = Question::from_elicitation(&url(bad)).expect_err("refused");
            assert!(err.0.starts_with(why), "{bad}: {err}");
        }
        let long = format!("https://h.example/{}", "a".repeat(MAX_URL_BYTES));
        assert!(Question::from_elicitation(&url(&long)).is_err());
        let no_id = json!({"mode": "url", "url": "https://h.example/", "message": "m"});
        assert!(Question::from_elicitation(&no_id).expect_err("no id").0.contains("elicitationId"));
        let with_id = |id: &str| json!({"mode": "url", "url": "https://h.example/", "message": "m", "elicitationId": id});
        let longest = "e".repeat(MAX_KEY_BYTES);
        assert!(Question::from_elicitation(&with_id(&longest)).is_ok(), "the longest id is taken");
        for bad in [String::new(), format!("{longest}e")] {
            let err = Question::from_elicitation(&with_id(&bad)).expect_err("refused");
            assert!(err.0.contains("elicitationId, a string of 1 to"), "{} bytes: {err}", bad.len());
        }
    }

    /// An answer at a bound is taken; one past it (or further) is refused.
    #[test]
    fn an_answer_at_a_bound_is_taken_and_past_it_refused() {
        let q = form(
            json!({"n": {"type": "integer", "minimum": 1, "maximum": 9}, "t": {"type": "string", "maxLength": 3}}),
            &[],
        )
        .expect("q");
        let check = |n: &str, t: &str| q.check(Some(&answers(json!({"n": n, "t": t})))).map_err(|e| e.reason);
        assert_eq!(check("1", "abc").expect("the bounds"), answers(json!({"n": 1, "t": "abc"})));
        assert!(check("9", "").is_ok());
        assert_eq!(check("0", "a"), Err("0 is below the minimum 1".to_owned()));
        assert_eq!(check("10", "a"), Err("10 is above the maximum 9".to_owned()));
        for long in ["abcd", "abcde"] {
            let want = format!("expected 0 to 3 characters, got {}", long.len());
            assert_eq!(check("5", long), Err(want));
        }
    }

    /// A blank answer is no answer whatever the field's type; a number may come as a number; any
    /// case of true and false is read; a list may hold as many choices as offered or the cap.
    #[test]
    fn blank_answers_are_none_and_typed_answers_are_read() {
        let q = form(
            json!({"i": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
                "m": {"type": "array", "items": {"enum": ["a", "b"]}}}),
            &[],
        )
        .expect("q");
        let blank = q.check(Some(&answers(json!({"i": " ", "x": " ", "b": " "})))).expect("blank is none");
        assert!(blank.is_empty(), "{blank:?}");
        let typed = q.check(Some(&answers(json!({"x": 2.5, "b": " FALSE "})))).expect("typed");
        assert_eq!(typed, answers(json!({"x": 2.5, "b": false})));
        let most = vec![json!("a"); MAX_CHOICES];
        assert_eq!(q.check(Some(&answers(json!({"m": most})))).expect("the cap")["m"], json!(["a"]));
        let past = vec![json!("a"); MAX_CHOICES + 1];
        let err = q.check(Some(&answers(json!({"m": past})))).expect_err("past the cap");
        assert_eq!(err.reason, "more choices than there are");
    }

    /// Each bound takes its limit and refuses one more; a keyword given as `null` is absent.
    #[test]
    fn every_bound_takes_its_limit_and_a_null_keyword_is_absent() {
        let text_field = json!({"type": "string"});
        let key = |n: usize| "k".repeat(n);
        assert!(form(json!({key(MAX_KEY_BYTES): text_field}), &[]).is_ok());
        for bad in [key(MAX_KEY_BYTES + 1), key(MAX_KEY_BYTES + 2), String::new()] {
            let err = form(json!({bad: text_field}), &[]).expect_err("key");
            assert!(err.0.starts_with("a field key must be 1 to"), "{err}");
        }
        let url = |n: usize| {
            let base = "https://h.example/";
            json!({"mode": "url", "elicitationId": "e", "message": "m", "url": format!("{base}{}", "a".repeat(n - base.len()))})
        };
        assert!(Question::from_elicitation(&url(MAX_URL_BYTES)).is_ok(), "a URL of the longest length");
        assert!(Question::from_elicitation(&url(MAX_URL_BYTES + 1)).is_err());
        let fields =
            |n: usize| Value::Object((0..n).map(|i| (format!("f{i}"), json!({"type": "string"}))).collect());
        assert_eq!(form(fields(MAX_FIELDS), &[]).expect("most fields").fields.len(), MAX_FIELDS);
        assert!(form(fields(MAX_FIELDS + 1), &[]).is_err());

        let choices = |n: usize| (0..n).map(|i| json!(format!("c{i}"))).collect::<Vec<_>>();
        let titled = |n: usize| {
            (0..n).map(|i| json!({"const": format!("c{i}"), "title": format!("C{i}")})).collect::<Vec<_>>()
        };
        let offers = |property: Value| match form(json!({"f": property}), &[]) {
            Ok(q) => match &q.fields[0].kind {
                FieldKind::One { offers, .. } | FieldKind::Many { offers, .. } => {
                    Ok(offers.iter().map(|o| o.label.clone()).collect::<Vec<_>>())
                }
                other => Err(format!("not a choice: {other:?}")),
            },
            Err(e) => Err(e.0),
        };
        let enum_of = |n: usize| json!({"type": "string", "enum": choices(n)});
        let one_of = |n: usize| json!({"type": "string", "oneOf": titled(n)});
        let any_of = |n: usize| json!({"type": "array", "items": {"anyOf": titled(n)}});
        for (name, make) in
            [("enum", &enum_of as &dyn Fn(usize) -> Value), ("oneOf", &one_of), ("anyOf", &any_of)]
        {
            assert_eq!(offers(make(MAX_CHOICES)).map(|o| o.len()), Ok(MAX_CHOICES), "{name}");
            for n in [0, MAX_CHOICES + 1] {
                let err = offers(make(n)).expect_err("refused");
                assert!(err.ends_with(&format!("1 to {MAX_CHOICES} choices")), "{name} of {n}: {err}");
            }
        }
        assert_eq!(offers(any_of(2)), Ok(vec!["C0".to_owned(), "C1".to_owned()]), "anyOf's titles");

        // null is no keyword: the other one is read, or none.
        let both = json!({"type": "string", "enum": ["a", "b"], "oneOf": null});
        assert_eq!(offers(both), Ok(vec!["a".to_owned(), "b".to_owned()]));
        let plain = form(json!({"f": {"type": "string", "enum": null}}), &[]);
        assert!(matches!(plain.expect("text").fields[0].kind, FieldKind::Text { .. }));
        let many = json!({"type": "array", "items": {"enum": ["x"], "anyOf": null}});
        assert_eq!(offers(many), Ok(vec!["x".to_owned()]));
        let neither = json!({"type": "array", "items": {"enum": null}});
        assert!(
            offers(neither)
                .expect_err("no choices")
                .ends_with("a multiple choice needs items with enum or anyOf")
        );
    }

    #[test]
    fn secrets_are_recognised_by_schema_or_name_and_redacted() {
        for name in [
            "password",
            "API key",
            "api_key",
            "GitHub token",
            "accessToken",
            "PIN",
            "otp",
            "Private key",
            "db-password",
        ] {
            assert!(secret_like(name), "{name}");
        }
        for name in ["name", "spinner", "tokens used", "pinned", "description", "apiary"] {
            assert!(!secret_like(name), "{name}");
        }
        let q = form(
            json!({
                "user": {"type": "string"},
                "code": {"type": "string", "writeOnly": true},
                "pass": {"type": "string", "format": "password"},
                "k": {"type": "string", "title": "API key"},
                "m": {"type": "string", "_meta": {"sensitive": true}},
            }),
            &[],
        )
        .expect("q");
        let sensitive: Vec<&str> = q.fields.iter().filter(|f| f.sensitive).map(|f| f.key.as_str()).collect();
        assert_eq!(sensitive, ["code", "k", "m", "pass"]);
        // A qwen question is secret when its header or its question says so, either alone.
        let asked = |header: &str, question: &str| {
            let call = qwen_call(json!([{"header": header, "question": question, "options": []}]));
            Question::from_qwen(&call).expect("a question").expect("well formed").fields[0].sensitive
        };
        assert!(asked("Token", "Which one should I use?"));
        assert!(asked("Access", "What is your password?"));
        assert!(!asked("Library", "Which library should we use?"));
        let given = q
            .check(Some(&answers(json!({"user": "ada", "code": "123", "pass": "hunter2", "k": "sk-1"}))))
            .expect("ok");
        assert_eq!(
            q.redacted(&given),
            json!({"code": REDACTED, "k": REDACTED, "pass": REDACTED, "user": "ada"})
        );
    }

    #[test]
    fn an_integer_fields_bounds_read_as_integers() {
        let q = form(
            json!({"n": {"type": "integer", "minimum": 1, "maximum": 9}, "x": {"type": "number", "minimum": 0.5}}),
            &[],
        )
        .expect("q");
        let asked = q.elicitation("s", "r", true, false).expect("form");
        assert_eq!(asked["requestedSchema"]["properties"]["n"]["maximum"].to_string(), "9");
        assert_eq!(asked["requestedSchema"]["properties"]["x"]["minimum"].to_string(), "0.5");
        let types = |k: &str| asked["requestedSchema"]["properties"][k]["type"].clone();
        assert_eq!((types("n"), types("x")), (json!("integer"), json!("number")), "each keeps its type");
        let wire = q.wire();
        assert_eq!(wire["fields"][0]["minimum"].to_string(), "1");
        assert_eq!(wire["fields"][1]["minimum"].to_string(), "0.5");
        assert_eq!(number(1e300), json!(1e300), "past 2^53 as it is");
        assert_eq!(number(-3.0).to_string(), "-3");
    }

    #[test]
    fn each_door_reads_the_same_question() {
        let q = form(
            json!({"lib": {"type": "string", "title": "Library", "description": "Which one?",
                "oneOf": [{"const": "c", "title": "chrono"}, {"const": "j", "title": "jiff", "description": "newer"}]}}),
            &["lib"],
        )
        .expect("q");
        assert_eq!(
            q.wire(),
            json!({"form": "form", "message": "Tell me more", "fields": [{
                "key": "lib", "title": "Library", "text": "Which one?", "type": "choice", "required": true,
                "sensitive": false, "multiple": false, "other": false,
                "choices": [{"value": "c", "label": "chrono", "description": ""}, {"value": "j", "label": "jiff", "description": "newer"}],
            }]})
        );
        let call = q.tool_call(Some("t1"));
        assert_eq!(call["_meta"]["qwenInteractionKind"], "user_question");
        assert_eq!(
            call["_meta"]["qwenQuestions"],
            json!([{"answerKey": "lib", "header": "Library", "question": "Which one?", "multiSelect": false,
                "options": [{"label": "chrono", "description": ""}, {"label": "jiff", "description": "newer"}]}])
        );
        assert_eq!((call["toolCallId"].clone(), call["title"].clone()), (json!("t1"), json!("Tell me more")));
        let asked = q.elicitation("s1", "r1", true, false).expect("a form for a form-capable client");
        assert_eq!(
            asked,
            json!({"sessionId": "s1", "mode": "form", "message": "Tell me more", "_meta": {"mediatord/requestId": "r1"},
                "requestedSchema": {"type": "object", "required": ["lib"], "properties": {"lib": {
                    "type": "string", "title": "Library", "description": "Which one?",
                    "oneOf": [{"const": "c", "title": "chrono"}, {"const": "j", "title": "jiff", "description": "newer"}]}}}})
        );
        assert_eq!(q.elicitation("s1", "r1", false, true), None, "a URL-only client gets no form");
        // A qwen question as a form, answered by a form client, reaches qwen as its strings.
        let qwen = Question::from_qwen(&qwen_call(library())).expect("q").expect("ok");
        let asked = qwen.elicitation("s1", "r2", true, true).expect("a form");
        assert_eq!(
            asked["requestedSchema"]["properties"]["0"]["oneOf"][1],
            json!({"const": "jiff", "title": "jiff", "description": "newer"})
        );
        let url = Question::from_elicitation(
            &json!({"mode": "url", "elicitationId": "agent-id", "url": "https://h.example/x", "message": "Sign in"}),
        )
        .expect("q");
        let asked = url.elicitation("s1", "r3", false, true).expect("a URL client");
        assert_eq!(asked["elicitationId"], "r3", "clients know it by the request id, never the agent's");
        assert_eq!(url.elicitation("s1", "r3", true, false), None);
        assert_eq!(
            url.tool_call(None)["content"][0]["content"]["text"],
            "Open https://h.example/x (on h.example)"
        );
        assert_eq!(url.elicitation_options()[0]["name"], "Open the link");
        assert!(Question::accepts("allow_once") && !Question::accepts("reject_once"));
    }

    #[test]
    fn a_list_of_choices_reads_the_same_through_each_door_and_an_open_question_has_no_choices() {
        let options: Vec<Value> = (0..10).map(|i| json!({"label": format!("o{i}")})).collect();
        let q = Question::from_qwen(&qwen_call(json!([
            {"question": "Which?", "header": "Pick", "multiSelect": true, "options": options},
            {"question": "Anything else?", "header": "Free", "options": []},
        ])))
        .expect("q")
        .expect("ok");
        let asked = &q.tool_call(None)["_meta"]["qwenQuestions"];
        assert_eq!(
            (asked[0]["multiSelect"].clone(), asked[0]["options"][9]["label"].clone()),
            (json!(true), json!("o9"))
        );
        assert_eq!((asked[1]["multiSelect"].clone(), asked[1]["options"].clone()), (json!(false), json!([])));
        let schema =
            &q.elicitation("s1", "r1", true, false).expect("a form")["requestedSchema"]["properties"];
        assert_eq!(schema["0"]["items"]["anyOf"][9], json!({"const": "o9", "title": "o9"}));
        assert_eq!(schema["1"], json!({"type": "string", "title": "Free", "description": "Anything else?"}));
        // Two choices are an answer; a choice a form did not offer is refused with the first eight
        // listed (qwen's own questions take any other text).
        let offered = |n: usize| -> Question {
            let any: Vec<Value> = (0..n).map(|i| json!({"const": format!("o{i}")})).collect();
            form(json!({"pick": {"type": "array", "items": {"anyOf": any}}}), &[]).expect("q")
        };
        let ten = offered(10);
        let checked = ten.check(Some(&answers(json!({"pick": ["o1", "o2"]})))).expect("two choices");
        assert_eq!(checked["pick"], json!(["o1", "o2"]));
        let err = ten.check(Some(&answers(json!({"pick": ["nine"]})))).expect_err("not offered");
        assert!(
            err.reason.ends_with(r#"among "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", and 2 more"#),
            "{}",
            err.reason
        );
        // No choice at all is no answer, whether the list may be empty or says `minItems: 0`.
        let none = form(
            json!({"pick": {"type": "array", "minItems": 0, "items": {"anyOf": [{"const": "a"}]}}}),
            &[],
        );
        assert_eq!(
            none.expect("q").check(Some(&answers(json!({"pick": []})))).expect("taken"),
            Answers::new()
        );
        let err = offered(8).check(Some(&answers(json!({"pick": ["nine"]})))).expect_err("not offered");
        assert!(err.reason.ends_with(r#""o6", "o7""#), "eight are all listed: {}", err.reason);
    }
}
