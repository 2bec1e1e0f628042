//! A terminal's sign-in through a browser (`mediatord login --browser`, and `login` when the
//! provider offers no device grant): the loopback redirect of RFC 8252 §7.3, with the daemon, not
//! the terminal, as the provider's client.
//!
//! The terminal listens on this machine's loopback (`http://127.0.0.1:PORT/<random path>`) and
//! opens `/auth/login?terminal=<that address>`; the sign-in runs as the web app's does (the same
//! `state`, nonce, PKCE and browser binding), and its callback sends the browser to the terminal's
//! address with the one-time code instead of to the web app. Only a loopback `http` address is
//! taken: the code then reaches only a program on the machine of the browser that signed in,
//! so a link someone sends you signs no terminal of theirs in as you.

use url::Url;

use super::error::SignInError;

/// The longest terminal address taken: `http://[::1]:65535/` and a random path are under 100.
pub const MAX_TARGET_CHARS: usize = 512;

/// Where a browser sign-in's outcome goes: a terminal's loopback address, and the name of the
/// device it pays for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminal {
    target: Url,
    name: String,
}

impl Terminal {
    /// `target` if it is a loopback `http` address with an explicit port and no user, query or
    /// fragment (`http://127.0.0.1:PORT/...` or `http://[::1]:PORT/...`), for a device called
    /// `name` (already checked as a device's name); else `InvalidTerminal`. A host name
    /// (`localhost`) is refused: a resolver or a hosts file could send it off the machine.
    pub fn parse(target: &str, name: String) -> Result<Terminal, SignInError> {
        if target.len() > MAX_TARGET_CHARS {
            return Err(SignInError::InvalidTerminal);
        }
        let url = Url::parse(target).map_err(|_| SignInError::InvalidTerminal)?;
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
            Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
            _ => false,
        };
        let plain = url.username().is_empty()
            && url.password().is_none()
            && url.query().is_none()
            && url.fragment().is_none();
        if url.scheme() != "http" || !loopback || url.port().is_none() || !plain {
            return Err(SignInError::InvalidTerminal);
        }
        Ok(Terminal { target: url, name })
    }

    /// What the device the sign-in pays for is called.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The terminal's address with `key=value` as its query: where the browser goes with the
    /// outcome (`code=<one-time code>` or `error=<sign-in error code>`).
    pub fn answer(&self, key: &str, value: &str) -> String {
        let mut url = self.target.clone();
        url.query_pairs_mut().append_pair(key, value);
        url.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(target: &str) -> Result<Terminal, SignInError> {
        Terminal::parse(target, "laptop".into())
    }

    #[test]
    fn only_a_loopback_http_address_with_a_port_is_a_terminal() {
        for good in ["http://127.0.0.1:41234/9f3a", "http://[::1]:8/", "http://127.0.0.1:65535"] {
            assert!(parse(good).is_ok(), "{good}");
        }
        for bad in [
            "https://127.0.0.1:41234/x",
            "http://127.0.0.2:41234/x",
            "http://localhost:41234/x",
            "http://evil.example:41234/x",
            "http://0.0.0.0:41234/x",
            "http://[::2]:41234/x",
            "http://127.0.0.1/x",
            "http://127.0.0.1:80/x",
            "http://user@127.0.0.1:41234/x",
            "http://user:pw@127.0.0.1:41234/x",
            "http://127.0.0.1:41234/x?code=planted",
            "http://127.0.0.1:41234/x#frag",
            "javascript:alert(1)",
            "//127.0.0.1:41234/x",
            "",
        ] {
            assert_eq!(parse(bad), Err(SignInError::InvalidTerminal), "{bad}");
        }
        let long = format!("http://127.0.0.1:1/{}", "a".repeat(MAX_TARGET_CHARS - 19));
        assert_eq!(long.len(), MAX_TARGET_CHARS);
        assert!(parse(&long).is_ok());
        assert_eq!(parse(&format!("{long}a")), Err(SignInError::InvalidTerminal));
    }

    #[test]
    fn the_answer_is_the_address_with_the_outcome_as_its_query() {
        let t = parse("http://127.0.0.1:41234/9f3a").expect("a terminal");
        assert_eq!(t.name(), "laptop");
        assert_eq!(t.answer("code", "ab&c d"), "http://127.0.0.1:41234/9f3a?code=ab%26c+d");
        assert_eq!(t.answer("error", "not_allowed"), "http://127.0.0.1:41234/9f3a?error=not_allowed");
    }
}
