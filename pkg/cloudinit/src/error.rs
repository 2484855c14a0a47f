//! Why bootstrap data could not be turned into a plan.
//!
//! Messages name the offending field (`write_files[2].encoding`) and never include file contents or
//! command text: bootstrap data is secret.

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why bootstrap data could not be turned into a [`Plan`](crate::Plan).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The Secret's `format` is one this crate does not execute (e.g. `ignition`).
    #[error("bootstrap data format {format:?} is not supported: {reason}")]
    UnsupportedFormat {
        /// The `format` value.
        format: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The payload is not a `#cloud-config` document (a shell script, MIME multi-part, gzip, ...).
    #[error("reading bootstrap data failed: {message}")]
    ReadPayload {
        /// What was found instead (never the payload itself).
        message: String,
    },
    /// Rendering the `## template: jinja` header's variables failed.
    #[error("rendering jinja template failed at line {line}: {message}")]
    RenderTemplate {
        /// 1-based line in the payload.
        line: usize,
        /// What is wrong (names the variable, never its value).
        message: String,
    },
    /// The YAML is malformed.
    #[error("parsing cloud-config YAML failed: {message}")]
    ParseYaml {
        /// Parser message with line and column.
        message: String,
    },
    /// A top-level key is a cloud-init module this crate does not implement.
    #[error(
        "cloud-config module {module:?} is not supported (supported: write_files, runcmd, bootcmd, users, \
         ntp, disk_setup, fs_setup, mounts, mount_default_fields; ignored: {ignored})"
    )]
    UnknownModule {
        /// The top-level key.
        module: String,
        /// The harmless keys that are accepted and ignored.
        ignored: String,
    },
    /// A field has the wrong type or an invalid value.
    #[error("invalid {field}: {message}")]
    InvalidField {
        /// Path of the field, e.g. `write_files[2].permissions`.
        field: String,
        /// What is wrong (never the field's content when it may be secret).
        message: String,
    },
    /// A `write_files` entry's content could not be decoded with its `encoding`.
    #[error("decoding {field} as {encoding} failed: {message}")]
    DecodeContent {
        /// Path of the content field, e.g. `write_files[0].content`.
        field: String,
        /// The encoding as written.
        encoding: String,
        /// Why.
        message: String,
    },
}

impl Error {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }
}
