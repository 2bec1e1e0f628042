//! A refusal of the configuration: the one line printed before the boot exits with status 2.

#[derive(Debug, thiserror::Error)]
#[error("mediatord: {0}")]
pub struct ConfigError(pub String);

pub(super) fn refuse<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}
