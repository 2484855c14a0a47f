//! Names capkk-rs derives, and the one hash that shortens them: host names for hosts that declare none, the
//! KKInstance name of a claim, the provider ID, and the address label of a claim. Every value here is
//! persisted (object names, Node names, label values), so none of these functions may change its output.
//!
//! ## Host names
//!
//! CAPKK made `spec.nodes.instances[].name` optional and its defaulting webhook filled in a random
//! `kk-instance-xxxxx`. capkk-rs has no webhook and never rewrites the user's spec (GitOps stays diff-free), so
//! the name of a host without one is derived from its address whenever it is needed, by a pure function:
//! the same spec gives the same name in every reconcile, on every replica and after `clusterctl move`.
//!
//! The rule ([`host_name_from_address`]):
//!
//! 1. lower-case the address;
//! 2. replace every character other than `a-z` and `0-9` with `-`;
//! 3. trim `-` from both ends;
//! 4. when the result is longer than 63 characters (or empty), keep its first 54 characters (trailing `-`
//!    trimmed) and append `-` and the 8 hex digits of the FNV-1a 32-bit hash of the original address.
//!
//! | address | host name |
//! |---|---|
//! | `192.168.100.3` | `192-168-100-3` |
//! | `fd00::a:1` | `fd00--a-1` |
//! | `Node-1.Example.com` | `node-1-example-com` |
//!
//! The result is a lower-case RFC 1123 DNS label. It is the host's hostname (set during bootstrap), the value
//! of `{{ ds.meta_data.local_hostname }}` in the bootstrap data and therefore the Node name with the shipped
//! templates, and the host part of the KKInstance name. Two hosts whose effective names collide (for example
//! an explicit `name: 192-168-100-3` next to a host at `192.168.100.3`) are reported by the KKCluster
//! controller as an invalid spec naming the field.

/// The width of an [`fnv1a`] hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnvWidth {
    /// 32 bits (host names: 8 hex digits).
    W32,
    /// 64 bits (claim names and address labels: 16 hex digits).
    W64,
}

/// FNV-1a of `bytes` at `width`: a fixed, documented, dependency-free hash (not for security). Both widths
/// are persisted in names and labels, so both stay exactly as specified (offset basis and prime of each).
pub fn fnv1a(bytes: &[u8], width: FnvWidth) -> u64 {
    let (offset, prime, mask) = match width {
        FnvWidth::W32 => (0x811c_9dc5, 0x0100_0193, u64::from(u32::MAX)),
        FnvWidth::W64 => (0xcbf2_9ce4_8422_2325, 0x0000_0100_0000_01b3, u64::MAX),
    };
    bytes
        .iter()
        .fold(offset, |h, b| ((h ^ u64::from(*b)).wrapping_mul(prime)) & mask)
}

/// The host name derived from an SSH `address` (see the module documentation for the rule).
pub fn host_name_from_address(address: &str) -> String {
    let mapped: String = address
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = mapped.trim_matches('-');
    if !name.is_empty() && name.len() <= 63 {
        return name.to_owned();
    }
    let head: String = name.chars().take(54).collect();
    let head = head.trim_end_matches('-');
    let hash = fnv1a(address.trim().as_bytes(), FnvWidth::W32);
    if head.is_empty() {
        format!("host-{hash:08x}")
    } else {
        format!("{head}-{hash:08x}")
    }
}

/// True when `name` is a lower-case RFC 1123 DNS label (what the CRD accepts for `instances[].name`).
pub fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// True when `name` is a DNS-1123 subdomain (a Secret's name): dot-separated lower-case labels, at most 253
/// bytes. Checked before a name from a CR becomes part of a request path, as the CRD pattern does.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// True when `host` is what a host address field admits (the CRD's [`crate::patterns::HOST_ADDRESS_RULE`]):
/// an IP address (IPv4 in dotted decimal only; not IPv4-mapped IPv6), or a DNS name (labels of letters, digits
/// and `-`, at most 253 bytes) whose last label is not a number. The last condition refuses every legacy
/// `inet_aton` form (`0x7f.1`, `0x7f000001`, `127.1`, `0177.0.0.1`, `2130706433`): the resolver reads them as
/// IPv4 addresses, so a name check would pass what is in fact 127.0.0.1. No port, path, space or `%` zone.
pub fn is_host_address(host: &str) -> bool {
    if host.contains(':') {
        return host
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.to_ipv4_mapped().is_none());
    }
    // Rust's parser takes dotted decimal only (no leading zeros, hex, octal or short forms), as `isIP` does.
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return true;
    }
    host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        && !ends_in_a_number(host)
}

/// True when the last dot-separated label of `host` is a decimal or `0x` hex number (see
/// [`is_host_address`]).
fn ends_in_a_number(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

/// CAPKK's provider ID form: `kk:///<kkcluster>/<host>`.
pub fn provider_id(kkcluster: &str, host: &str) -> String {
    format!("kk:///{kkcluster}/{host}")
}

/// The name of the KKInstance claiming `host` of `kkcluster`: `<kkcluster>.<host>`. Unambiguous because
/// host names are DNS labels (no dots). Names longer than an object name allows keep a hash of the
/// KKCluster name instead of its tail.
pub fn instance_name(kkcluster: &str, host: &str) -> String {
    let name = format!("{kkcluster}.{host}");
    if name.len() <= 253 {
        return name;
    }
    let keep = 253 - host.len() - 1 - 17;
    let mut cut = keep.min(kkcluster.len());
    while !kkcluster.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = kkcluster[..cut].trim_end_matches(['-', '.']);
    format!(
        "{prefix}-{:016x}.{host}",
        fnv1a(kkcluster.as_bytes(), FnvWidth::W64)
    )
}

/// The value of the address label of a claim ([`crate::consts::ADDRESS_HASH_LABEL`]): label values allow 63
/// characters, addresses 253.
pub fn address_hash(address: &str) -> String {
    format!(
        "{:016x}",
        fnv1a(address.trim().to_ascii_lowercase().as_bytes(), FnvWidth::W64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_the_documented_names() {
        assert_eq!(host_name_from_address("192.168.100.3"), "192-168-100-3");
        assert_eq!(host_name_from_address("fd00::a:1"), "fd00--a-1");
        assert_eq!(host_name_from_address("Node-1.Example.com"), "node-1-example-com");
        assert_eq!(host_name_from_address(" 10.0.0.1 "), "10-0-0-1");
        assert_eq!(host_name_from_address("::1"), "1");
    }

    #[test]
    fn every_derived_name_is_a_dns_label_and_stable() {
        let long = format!("{}.example.com", "a".repeat(70));
        for addr in [
            "192.168.100.3",
            "fd00::a:1",
            "::",
            "host.example.com",
            long.as_str(),
            "a-.b",
            "x".repeat(63).as_str(),
        ] {
            let n = host_name_from_address(addr);
            assert!(is_dns_label(&n), "{addr:?} -> {n:?}");
            assert_eq!(n, host_name_from_address(addr), "{addr:?} is not stable");
        }
        let n = host_name_from_address(&long);
        assert_eq!(n.len(), 63, "{n}");
        assert!(n.starts_with(&"a".repeat(54)), "{n}");
        assert_ne!(
            host_name_from_address(&format!("{}.example.org", "a".repeat(70))),
            n,
            "the hash keeps long names apart"
        );
        assert_eq!(
            host_name_from_address("::"),
            "host-980630f5",
            "the documented hash of the address, unchanged"
        );
    }

    #[test]
    fn dns_label_check_matches_the_crd_pattern() {
        for ok in ["a", "cp-1", "192-168-0-1", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn secret_names_that_would_change_the_request_path_are_not_dns_subdomains() {
        for ok in ["ssh", "ssh.keys", "a-1.b-2"] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "a/b",
            "a?watch=1",
            "..",
            "a..b",
            ".a",
            "A",
            "a%2F",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn host_addresses_are_ip_literals_or_dns_names_never_inet_aton_forms() {
        for ok in [
            "198.18.0.11",
            "fd00::a:1",
            "::1",
            "node-1.example.com",
            "Node-1.Example.COM",
            "host1",
            "a.b1",
            "1a.example",
            "0xg.example",
        ] {
            assert!(is_host_address(ok), "{ok}");
        }
        for bad in [
            // inet_aton's legacy IPv4 forms: hex, octal, short, one number; each is 127.0.0.1 to the resolver.
            "0x7f.1",
            "0x7f000001",
            "0X7F.0.0.1",
            "0177.0.0.1",
            "127.1",
            "2130706433",
            "127.0.0.1.",
            "999.0.0.1",
            "example.0x",
            // IPv4-mapped IPv6 (the apiserver's isIP refuses it too), zones, ports, paths, spaces.
            "::ffff:127.0.0.1",
            "fe80::1%eth0",
            "198.18.0.1:6443",
            "vip.example/x",
            "vip.example#f",
            "vip example",
            "",
            "-a.example",
            "a..b",
            &format!("{}.example", "a".repeat(64)),
        ] {
            assert!(!is_host_address(bad), "{bad}");
        }
    }

    #[test]
    fn claims_are_named_by_kkcluster_and_host() {
        assert_eq!(instance_name("a", "node1"), "a.node1");
        assert_ne!(instance_name("a", "node1"), instance_name("b", "node1"));
        let long = "k".repeat(250);
        let n = instance_name(&long, "node1");
        assert!(n.len() <= 253, "{}", n.len());
        assert!(n.ends_with(".node1"));
        assert_ne!(n, instance_name(&format!("{}x", &long[..249]), "node1"));
        assert_eq!(provider_id("a", "node1"), "kk:///a/node1");
    }

    #[test]
    fn persisted_names_and_labels_keep_their_exact_values() {
        // KKInstances exist under these names and labels: a changed hash would orphan them.
        assert_eq!(
            instance_name(&"k".repeat(250), "node1"),
            format!("{}-bda6964a8cb408db.node1", "k".repeat(230))
        );
        assert_eq!(address_hash("10.0.0.1"), "87f7ef5de06ff78d");
        assert_eq!(address_hash(" Node.Example.com "), "b94650596e4a47ba");
        let long = format!("{}.example.com", "a".repeat(70));
        assert_eq!(
            host_name_from_address(&long),
            format!("{}-b3cefbc8", "a".repeat(54))
        );
    }
}
