//! One delivery: an HTTP/1.1 request (a POST; a PATCH for a Discord update) through the daemon's
//! one outgoing HTTP client ([`crate::outgoing`]: TCP or, for an `https://` target, TLS trusting
//! [`crate::tls::client_trust`]), signed when the target has a secret, tried up to
//! [`MAX_ATTEMPTS`] times; a certificate the client does not trust is not retried.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::NotifyTarget;
use crate::outgoing::{self, Answer, Failure, Outgoing};

/// Attempts per delivery: the first and two retries, on network errors, timeouts and 5xx only.
pub(super) const MAX_ATTEMPTS: u32 = 3;
/// One attempt (connect, send, status line) at most: a webhook answers in well under a second,
/// and a hanging receiver must not hold its target's queue for long.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a receiver's answer kept: Telegram's and Discord's name the message sent (a few
/// hundred bytes of JSON, more with a long text echoed back), to update it once decided.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Waits before the second and the third attempt: a restarting receiver is usually back within
/// seconds, and a person waiting for a notification should not wait for a long schedule.
const BACKOFF: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// The request's method: every delivery is a POST but a Discord message's update.
pub(super) use crate::outgoing::Verb;

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A 2xx, and the start of its body (at most [`MAX_ANSWER_BYTES`]).
    Sent { status: u16, attempts: u32, answer: Vec<u8> },
    /// A status that retrying cannot change (4xx, or a 1xx/3xx this client does not follow).
    Refused { status: u16 },
    /// Every attempt failed on the network, timed out or got a 5xx; the last reason.
    Failed { reason: String, attempts: u32 },
    /// The target's certificate is not trusted (unknown issuer, another name, expired): not
    /// retried, since only its owner or the daemon's trust store can change that.
    Untrusted { reason: String },
}

/// `sha256=<hex>` of the HMAC-SHA256 of `body` under `secret`.
pub(super) fn signature(secret: &str, body: &[u8]) -> String {
    // An HMAC takes a key of any length: this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Sends `body` to `path` on `target`'s server with its headers and the mediatord ones, retrying
/// as documented.
pub(super) async fn deliver(
    tls: Option<&Arc<rustls::ClientConfig>>,
    target: &NotifyTarget,
    verb: Verb,
    path: &str,
    event: &str,
    delivery_id: &str,
    body: String,
) -> Outcome {
    let mut headers: Vec<(String, String)> =
        vec![("x-mediatord-event".into(), event.into()), ("x-mediatord-delivery".into(), delivery_id.into())];
    if let Some(secret) = &target.secret {
        headers.push(("x-mediatord-signature".into(), signature(secret.expose(), body.as_bytes())));
    }
    for (name, value) in &target.headers {
        headers.push((name.clone(), value.expose().to_owned()));
    }
    let outgoing = Outgoing { url: &target.url, verb, path, headers: &headers, max_answer: MAX_ANSWER_BYTES };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reason = match tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            outgoing::send(tls, &outgoing, body.clone().into_bytes()),
        )
        .await
        {
            Ok(Ok(Answer { status, body: answer, .. })) if (200..300).contains(&status) => {
                return Outcome::Sent { status, attempts, answer };
            }
            Ok(Ok(Answer { status, .. })) if status < 500 => return Outcome::Refused { status },
            Ok(Ok(Answer { status, .. })) => format!("HTTP {status}"),
            Ok(Err(Failure::Untrusted(reason))) => return Outcome::Untrusted { reason },
            Ok(Err(Failure::Transient(e))) => e,
            Err(_) => format!("no answer within {} ms", ATTEMPT_TIMEOUT.as_millis()),
        };
        if attempts >= MAX_ATTEMPTS {
            return Outcome::Failed { reason, attempts };
        }
        tokio::time::sleep(BACKOFF[(attempts as usize - 1).min(BACKOFF.len() - 1)]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
