//! Host names for pool hosts that do not declare one.
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

/// FNV-1a, 32 bits: a tiny, fixed, documented hash (only used to shorten over-long names deterministically).
fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
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
    let hash = fnv1a32(address.trim().as_bytes());
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
            format!("host-{:08x}", fnv1a32(b"::"))
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
}
