//! Where controller-side downloads may connect.
//!
//! The manager downloads what a tenant's object names (an override URL, a mirror host). Unchecked, that makes
//! it a client of whatever the tenant picks: the manager's own loopback, the cloud metadata service, the
//! management cluster's Services and Pods. Before a download its host is resolved once and every address is
//! checked ([`DownloadPolicy::pin`]); the HTTP client then connects only to those checked addresses, so a
//! name that resolves elsewhere a moment later (DNS rebinding) reaches nothing unchecked.
//!
//! Which addresses are refused is decided by [`capkk_executor::address`], shared with the SSH pool's dials:
//! refused always: unspecified, link-local (169.254.0.0/16 and fe80::/10, where cloud metadata answers),
//! the metadata addresses outside link-local, multicast and broadcast. Refused unless opted in: loopback.
//! Refused as the controller says: the cluster's own ranges ([`DownloadPolicy::deny`]). Ordinary private
//! ranges (10/8, 172.16/12, 192.168/16, 198.18/15, fc00::/7) are allowed: private mirrors are normal. An
//! allow-list ([`DownloadPolicy::allow`]) narrows this further; it never makes a refused address reachable.
//! An IPv6 address that embeds an IPv4 one (mapped, compatible, NAT64, 6to4) is checked as both.

use std::{
    net::{IpAddr, SocketAddr},
    str::FromStr,
    time::Duration,
};

pub use capkk_executor::address::Cidr;
use capkk_executor::address::{AddressPolicy, Refusal};

/// One entry of the operator's allow-list: a host name (`mirror.example`, or `*.example` for any name
/// under it) or an IP range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowEntry {
    /// A host name, lower case, without a trailing dot; `*.` first matches every name below the rest.
    Host(String),
    /// Addresses in this range.
    Range(Cidr),
}

impl FromStr for AllowEntry {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(c) = s.parse::<Cidr>() {
            return Ok(AllowEntry::Range(c));
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let bare = name.strip_prefix("*.").unwrap_or(&name);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if bare.len() <= 253 && bare.split('.').all(label_ok) {
            Ok(AllowEntry::Host(name))
        } else {
            Err(format!(
                "{s:?} is neither a host name (mirror.example, *.example) nor an IP range (10.0.0.0/8)"
            ))
        }
    }
}

/// Which destinations controller-side downloads may reach (see the module documentation). The default
/// refuses the fixed classes and loopback, with no cluster ranges and no allow-list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DownloadPolicy {
    /// Ranges refused besides the fixed classes: the management cluster's Service and Pod ranges (the
    /// manager's `--download-deny-cidr`).
    pub deny: Vec<Cidr>,
    /// When not empty, a download's host must be named here or all its addresses lie in a range here (the
    /// manager's `--download-allow`).
    pub allow: Vec<AllowEntry>,
    /// Loopback addresses may be reached (the manager's `--download-allow-loopback`): a mirror beside the
    /// manager in its Pod, or a test's.
    pub allow_loopback: bool,
}

/// Where a checked download may connect: the URL's host name and the addresses it resolved to (none for a
/// URL naming an IP address, which needs no resolution).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The host name as it appears in the URL (lower case); `None` for an IP address.
    pub name: Option<String>,
    /// The checked addresses (all of them passed).
    pub addrs: Vec<SocketAddr>,
}

/// Why [`DownloadPolicy::pin`] did not give addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinError {
    /// The URL is not an absolute http(s) URL with a host.
    NotHttp(String),
    /// The destination is refused by the policy (terminal until the spec or the flags change).
    Refused(String),
    /// The host name did not resolve (may be transient).
    Unresolved(String),
}

impl DownloadPolicy {
    /// Why `ip` must not be reached (`None`: it may). Says what the address is, never the address itself.
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        // The download allow-list narrows; it is no exception to a refusal, so the shared policy gets none.
        let addresses = AddressPolicy {
            deny: self.deny.clone(),
            allow: Vec::new(),
            allow_loopback: self.allow_loopback,
        };
        addresses.refusal(ip).map(|r| match r {
            Refusal::Loopback => format!("{r} (allowed only by --download-allow-loopback)"),
            Refusal::Denied(_) => format!("{r} (--download-deny-cidr)"),
            r => r.to_string(),
        })
    }

    fn allows_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.allow.iter().any(|e| match e {
            AllowEntry::Host(h) => match h.strip_prefix("*.") {
                Some(parent) => name
                    .strip_suffix(parent)
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                None => *h == name,
            },
            AllowEntry::Range(_) => false,
        })
    }

    fn allows_addr(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|e| match e {
            AllowEntry::Range(c) => c.contains(ip),
            AllowEntry::Host(_) => false,
        })
    }

    /// Check `ip` for a URL whose host is written `host` (`None` when it may be reached).
    fn check(&self, host: &str, ip: IpAddr, by_name: bool) -> Option<String> {
        let verb = if by_name { "resolves to" } else { "is" };
        if let Some(why) = self.refusal(ip) {
            return Some(format!("{host} {verb} {why}"));
        }
        if !self.allow.is_empty() && !by_name && !self.allows_addr(ip) {
            return Some(format!(
                "{host} is not on the download allow-list (--download-allow)"
            ));
        }
        None
    }

    /// Resolve the host of `url` once and check every address it has; the result is what a download may
    /// connect to, and nothing else. A name on the allow-list still has its addresses checked.
    pub async fn pin(&self, url: &str) -> Result<Pinned, PinError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| PinError::NotHttp("not a URL".to_owned()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(PinError::NotHttp(format!(
                "{}: is not http or https",
                parsed.scheme()
            )));
        }
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| PinError::NotHttp("the URL has no host".to_owned()))?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return match self.check(host, ip, false) {
                Some(why) => Err(PinError::Refused(why)),
                None => Ok(Pinned {
                    name: None,
                    addrs: vec![SocketAddr::new(ip, port)],
                }),
            };
        }
        let named = self.allow.is_empty() || self.allows_name(host);
        let addrs: Vec<SocketAddr> =
            tokio::time::timeout(Duration::from_secs(30), tokio::net::lookup_host((host, port)))
                .await
                .map_err(|_| PinError::Unresolved(format!("resolving {host} timed out")))?
                .map_err(|e| PinError::Unresolved(format!("resolving {host} failed: {e}")))?
                .collect();
        if addrs.is_empty() {
            return Err(PinError::Unresolved(format!("{host} has no address")));
        }
        for a in &addrs {
            let why = if named {
                self.check(host, a.ip(), true)
            } else if self.refusal(a.ip()).is_some() || !self.allows_addr(a.ip()) {
                // Neither the name nor every address is on the allow-list.
                Some(format!(
                    "{host} is not on the download allow-list (--download-allow)"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                tracing::debug!(host, address = %a.ip(), "download destination refused: {why}");
                return Err(PinError::Refused(why));
            }
        }
        Ok(Pinned {
            name: Some(host.to_owned()),
            addrs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn policy(deny: &[&str], allow: &[&str], allow_loopback: bool) -> DownloadPolicy {
        DownloadPolicy {
            deny: deny.iter().map(|c| c.parse().unwrap()).collect(),
            allow: allow.iter().map(|c| c.parse().unwrap()).collect(),
            allow_loopback,
        }
    }

    #[test]
    fn loopback_link_local_metadata_unspecified_and_multicast_addresses_are_refused_by_default() {
        let p = DownloadPolicy::default();
        for (addr, what) in [
            ("127.0.0.1", "loopback"),
            ("127.3.2.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("169.254.0.23", "link-local"),
            ("fe80::1", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:a9fe:a9fe::1", "link-local"),
            ("100.100.100.200", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("ff02::1", "multicast"),
        ] {
            let why = p
                .refusal(ip(addr))
                .unwrap_or_else(|| panic!("{addr} must be refused"));
            assert!(why.contains(what), "{addr}: {why}");
            assert!(
                !why.contains(addr),
                "the reason names the class, not the address: {why}"
            );
        }
    }

    #[test]
    fn ordinary_private_and_public_addresses_are_allowed() {
        let p = policy(&["10.96.0.0/12", "10.244.0.0/16"], &[], false);
        for addr in [
            "10.0.0.5",
            "10.95.255.255",
            "10.112.0.1",
            "172.16.0.1",
            "192.168.1.10",
            "198.18.0.1",
            "198.19.255.1",
            "100.64.0.1",
            "fd12:3456::1",
            "8.8.8.8",
            "2001:db8::1",
            "::ffff:192.168.1.1",
        ] {
            assert_eq!(p.refusal(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn the_clusters_own_ranges_are_refused_and_name_the_flag() {
        let p = policy(&["10.96.0.0/12", "fd00:10:96::/112"], &[], false);
        for addr in [
            "10.96.0.1",
            "10.111.255.254",
            "fd00:10:96::a",
            "::ffff:10.96.0.10",
        ] {
            let why = p.refusal(ip(addr)).unwrap_or_else(|| panic!("{addr}"));
            assert!(why.contains("--download-deny-cidr"), "{addr}: {why}");
        }
    }

    #[test]
    fn loopback_is_allowed_only_when_opted_in() {
        assert!(DownloadPolicy::default().refusal(ip("127.0.0.1")).is_some());
        let p = policy(&[], &[], true);
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
        assert_eq!(p.refusal(ip("::1")), None);
        assert!(
            p.refusal(ip("169.254.169.254")).is_some(),
            "opting in to loopback opens nothing else"
        );
    }

    #[test]
    fn a_cluster_range_covering_loopback_is_refused_also_when_loopback_is_allowed() {
        let p = policy(&["127.0.0.2/32"], &[], true);
        assert!(
            p.refusal(ip("127.0.0.2"))
                .is_some_and(|w| w.contains("--download-deny-cidr"))
        );
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
    }

    #[test]
    fn an_allow_list_never_makes_a_refused_address_reachable() {
        let p = policy(&[], &["169.254.0.0/16", "127.0.0.0/8"], false);
        assert!(p.check("169.254.169.254", ip("169.254.169.254"), false).is_some());
        assert!(p.check("127.0.0.1", ip("127.0.0.1"), false).is_some());
    }

    #[test]
    fn allow_entries_parse_or_say_what_they_expect() {
        assert_eq!(
            "Mirror.Example.".parse::<AllowEntry>().unwrap(),
            AllowEntry::Host("mirror.example".into())
        );
        assert!(matches!(
            "192.168.0.0/16".parse::<AllowEntry>().unwrap(),
            AllowEntry::Range(_)
        ));
        for bad in ["http://mirror", "mirror/x", "-a.example", "a..b", "", "*."] {
            assert!(bad.parse::<AllowEntry>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn allow_list_names_match_exactly_or_below_a_wildcard() {
        let p = policy(&[], &["mirror.example", "*.corp.example"], false);
        assert!(p.allows_name("mirror.example"));
        assert!(p.allows_name("MIRROR.example."));
        assert!(p.allows_name("a.corp.example"));
        assert!(p.allows_name("b.a.corp.example"));
        assert!(
            !p.allows_name("corp.example"),
            "the wildcard is for names below it"
        );
        assert!(!p.allows_name("evilcorp.example"));
        assert!(!p.allows_name("mirror.example.evil"));
        assert!(!p.allows_name("xmirror.example"));
    }

    #[tokio::test]
    async fn a_url_naming_localhost_is_resolved_and_refused() {
        let err = DownloadPolicy::default()
            .pin("http://localhost:8080/x")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PinError::Refused(why) if why.contains("localhost resolves to a loopback address")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_name_off_the_allow_list_is_refused_even_on_a_private_address() {
        let p = policy(&[], &["mirror.example"], true);
        let err = p.pin("http://localhost:8080/x").await.unwrap_err();
        assert!(
            matches!(&err, PinError::Refused(why) if why.contains("not on the download allow-list")),
            "{err:?}"
        );
        let p = policy(&[], &["localhost"], true);
        let pinned = p.pin("http://localhost:8080/x").await.unwrap();
        assert_eq!(pinned.name.as_deref(), Some("localhost"));
        assert!(
            pinned
                .addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080)
        );
    }

    #[tokio::test]
    async fn urls_that_are_not_http_are_not_pinned() {
        let p = DownloadPolicy::default();
        for url in [
            "file:///etc/passwd",
            "ftp://mirror/x",
            "not a url",
            "unix:/run/x.sock",
        ] {
            assert!(matches!(p.pin(url).await, Err(PinError::NotHttp(_))), "{url}");
        }
    }
}
