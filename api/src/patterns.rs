//! OpenAPI `pattern`s of every field whose value reaches a host (a script variable, a file name, a unit).
//! The service layer checks the same shapes again before it renders anything (defence in depth: objects
//! written before a pattern existed, or by a client that skips validation, are refused with the field named).

/// A version: digits first (never an option), then letters, digits, `.`, `+`, `-` (`v1.32.0`, `1.7.13`,
/// `v1.30.0-rc.1+k3s1`).
pub const VERSION: &str = "^v?[0-9][0-9A-Za-z.+-]{0,63}$";
/// A CRI socket: an absolute path, optionally as a `unix://` URL.
pub const CRI_SOCKET: &str = "^(unix://)?/[A-Za-z0-9._/-]{1,200}$";
/// A registry `host[:port]` (DNS name, IPv4, or bracketed IPv6); never `.` or `..` (it names a directory).
pub const REGISTRY: &str =
    "^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:[0-9]{1,5})?$";
/// `privateRegistry`: a [`REGISTRY`] or empty. CAPKK's Go type writes the unset field as `""`, so objects
/// exported from a CAPKK cluster carry `privateRegistry: ""`; empty means unset (the controller drops it).
pub const PRIVATE_REGISTRY: &str =
    "^$|^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:[0-9]{1,5})?$";
/// An insecure registry: a [`REGISTRY`], optionally with an `http://`/`https://` scheme and a final `/`.
pub const INSECURE_REGISTRY: &str =
    "^(https?://)?(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:[0-9]{1,5})?/?$";
/// An http(s) URL without white space or double quotes.
pub const HTTP_URL: &str = "^https?://[^\\s\"]+$";
/// A hex SHA-256: exactly 64 hex digits (it names a file in the controller's artifact cache).
pub const SHA256: &str = "^[0-9a-fA-F]{64}$";
/// An artifact id of the catalogue (`kubeadm`, `cni`, `iso`, ...).
pub const ARTIFACT_ID: &str = "^[a-z0-9][a-z0-9-]{0,62}$";
/// An architecture (`amd64`, `arm64`; empty: all).
pub const ARCH: &str = "^[a-z0-9_]{0,16}$";
/// A path or URL without white space.
pub const NO_SPACE: &str = "^\\S+$";
/// An ISO file name (`none`, `auto` or a file name: no `/`, not starting with `.`).
pub const ISO: &str = "^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$";
/// An OS package name (never an option).
pub const PACKAGE: &str = "^[A-Za-z0-9][A-Za-z0-9+._:-]{0,254}$";
/// A container image reference.
pub const IMAGE: &str = "^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$";
