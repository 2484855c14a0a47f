//! OpenAPI `pattern`s of every field whose value reaches a host (a script variable, a file name, a unit).
//! The service layer checks the same shapes again before it renders anything (defence in depth: objects
//! written before a pattern existed, or by a client that skips validation, are refused with the field named).

/// One path component other than `..` and the empty one, of characters of the bracket expression `$any`
/// (which admits `.`; `$not_dot` is the same set without `.`): `.`, or a first character other than `.`, or
/// `.` and a second character other than `.`, or `..` and at least one more character. RE2 (the apiserver's
/// regexp) has no lookahead, hence the spelled-out alternatives.
macro_rules! path_component {
    ($any:literal, $not_dot:literal) => {
        concat!(
            "(\\.|", $not_dot, $any, "*|\\.", $not_dot, $any, "*|\\.\\.", $any, "+)"
        )
    };
}

/// A version: digits first (never an option), then letters, digits, `.`, `+`, `-` (`v1.32.0`, `1.7.13`,
/// `v1.30.0-rc.1+k3s1`).
pub const VERSION: &str = "^v?[0-9][0-9A-Za-z.+-]{0,63}$";
/// A CRI socket: an absolute path, optionally as a `unix://` URL, without a `..` component (the service
/// checks that again); the field's `maxLength` bounds the size.
pub const CRI_SOCKET: &str = concat!(
    "^(unix://)?(/",
    path_component!("[A-Za-z0-9._-]", "[A-Za-z0-9_-]"),
    ")+$"
);
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
/// A DNS-1123 subdomain (a Secret's name): it is a path segment of the API request that reads the Secret, so
/// `/`, `?`, `%` or `..` never reach the request path.
pub const DNS_SUBDOMAIN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A lower-case DNS label (a host name, a Node name).
pub const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// CAPKK's `secret`: a [`DNS_SUBDOMAIN`] or empty (CAPKK's Go type writes the unset field as `""`).
pub const SECRET_NAME_OR_EMPTY: &str =
    "^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A path on the controller's file system (`privateKeyPath`): no white space or control character, no
/// empty and no `..` component (it is confined to the key directory in code as well; this refuses a
/// traversal at admission). A component is `.`, or starts with a character other than `.`, or with `.`
/// and another character other than `.`, or with `..` and at least one more character.
pub const KEY_PATH: &str = concat!(
    "^/?(",
    path_component!("[^/\\s\\x00-\\x1f\\x7f]", "[^./\\s\\x00-\\x1f\\x7f]"),
    "/)*",
    path_component!("[^/\\s\\x00-\\x1f\\x7f]", "[^./\\s\\x00-\\x1f\\x7f]"),
    "$"
);
/// A path on the host (a registry's CA, client certificate and key, certificate directory; written into
/// containerd's `hosts.toml`): no white space or control character (a newline would start a new TOML
/// line). Empty means unset (CAPKK writes `""`).
pub const HOST_PATH: &str = "^[^\\s\\x00-\\x1f\\x7f]*$";
/// A provider ID (`kk:///<kkcluster>/<instance>`; compared with the Node's `spec.providerID`): no white
/// space or control character.
pub const PROVIDER_ID: &str = "^[^\\s\\x00-\\x1f\\x7f]+$";
/// A SHA-256 host-key fingerprint as `ssh-keygen -lf` prints it (`SHA256:<43 base64 characters>`): the only
/// shape the SSH client compares a presented key with.
pub const HOST_KEY_FINGERPRINT: &str = "^SHA256:[A-Za-z0-9+/]{43}=?$";
/// An SSH connect timeout written as text: a number of seconds or a Go-style duration of `h`, `m`, `s`,
/// `ms` parts, each at most 9 digits (so the sum never overflows).
pub const SSH_TIMEOUT: &str = "^[0-9]{1,9}$|^([0-9]{1,9}(h|m|s|ms)){1,4}$";
/// A Linux network interface name (`IFNAMSIZ` - 1 = 15 bytes; no `/`, white space or `:`, never `.` or `..`):
/// keepalived's `interface` and the VIP's `dev`.
pub const INTERFACE: &str = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$";
/// A download zone (`cn`; empty: the default mirrors).
pub const ZONE: &str = "^[A-Za-z0-9-]{0,16}$";

/// CEL (RE2, as a CEL string literal inside the rule) of a DNS name: dot-separated labels of letters, digits
/// and `-`, neither starting nor ending with `-`, each at most 63 characters.
macro_rules! cel_dns_name {
    () => {
        "^[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?(\\\\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)*$"
    };
}

/// CEL (RE2) of a name whose last label is a number, decimal or `0x` hex: what `inet_aton` (and so
/// `getaddrinfo`) reads as an IPv4 address in one of its legacy forms (`0x7f.1`, `0x7f000001`, `127.1`,
/// `0177.0.0.1`), and what the WHATWG URL parser treats as one too. Never a real host name (no top-level domain
/// is a number).
macro_rules! cel_numeric_tail {
    () => {
        "(^|\\\\.)([0-9]+|0[xX][0-9a-fA-F]*)$"
    };
}

/// The CEL rule of a host address field (`self` a string): an IP address (IPv4 only in dotted decimal: the
/// apiserver's `isIP` refuses leading zeros, short forms and IPv4-mapped IPv6), or a DNS name that does not end
/// in a number (so no `inet_aton` form: they resolve to an address the rule never saw, e.g. `0x7f.1` to
/// 127.0.0.1). [`crate::names::is_host_address`] is the same check in code.
macro_rules! cel_host_address {
    () => {
        concat!(
            "self.contains(':') ? isIP(self) : (isIP(self) || (self.matches('",
            cel_dns_name!(),
            "') && !self.matches('",
            cel_numeric_tail!(),
            "')))"
        )
    };
}

/// [`HOST_ADDRESS_RULE`] or the empty string (fields CAPKK writes as `""` when unset).
pub const HOST_ADDRESS_OR_EMPTY_RULE: &str = concat!("self == '' || (", cel_host_address!(), ")");
/// The CEL rule of a host address (see [`crate::names::is_host_address`]).
pub const HOST_ADDRESS_RULE: &str = cel_host_address!();
