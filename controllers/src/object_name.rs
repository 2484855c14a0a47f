//! Names of other objects read from a field (a spec reference, an owner reference, a label, a KKMachine's
//! `spec.instanceID`), checked before they become a segment of an API request's path.
//!
//! kube's client refuses only an empty name: anything else is spliced into the URL as it is, so a name such as
//! `?watch=true&timeoutSeconds=86400` turns `GET …/kkinstances/<name>` into a day-long WATCH of the namespace
//! with the manager's token, and `a/b` or `..` addresses another resource. Tenants write these fields, and the
//! API server does not check the format of every one (an owner reference's `name`, for one). Every request for
//! such a name takes an [`ObjectName`], which only [`ObjectName::checked`] makes: a DNS-1123 subdomain (what
//! the API server accepts as a name of the kinds read here), or an [`Error::InvalidName`] naming the field,
//! and no request.

use std::fmt;

use crate::error::{Error, Result};

/// The longest part of a refused value quoted in an error (the rest is cut: the field names what to fix).
const QUOTED: usize = 64;

/// A name from a field, checked to be a DNS-1123 subdomain (no `/`, `?`, `%`, `..`, upper case or white
/// space), so that it addresses exactly the object it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ObjectName<'a>(&'a str);

impl<'a> ObjectName<'a> {
    /// `name`, read from `field` (e.g. `Machine.spec.infrastructureRef.name`), once checked; else an
    /// [`Error::InvalidName`] naming the field.
    pub(crate) fn checked(field: &str, name: &'a str) -> Result<Self> {
        if capkk_api::is_dns_subdomain(name) {
            return Ok(Self(name));
        }
        let mut quoted: String = name.chars().take(QUOTED).collect();
        if quoted.len() < name.len() {
            quoted.push_str("...");
        }
        Err(Error::InvalidName {
            field: field.to_owned(),
            name: quoted,
        })
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &'a str {
        self.0
    }
}

impl fmt::Display for ObjectName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_change_the_request_path_are_refused_naming_the_field() {
        for bad in [
            "?watch=true&timeoutSeconds=86400",
            "m?watch=1",
            "a/b",
            "..",
            ".",
            "a%2Fb",
            "Upper",
            "a b",
            "",
            "a..b",
            "-a",
        ] {
            match ObjectName::checked("spec.instanceID", bad) {
                Err(e @ Error::InvalidName { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains("spec.instanceID"), "{bad:?}: {msg}");
                    assert!(msg.contains("DNS-1123 subdomain"), "{bad:?}: {msg}");
                }
                other => panic!("{bad:?} was not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn object_names_pass_unchanged() {
        let longest = [
            &"a".repeat(63)[..],
            &"b".repeat(63),
            &"c".repeat(63),
            &"d".repeat(61),
        ]
        .join(".");
        for ok in ["m", "c.node1", "cluster-1-md-0-abcde", &longest] {
            assert_eq!(
                ObjectName::checked("f", ok).expect(ok).as_str(),
                ok,
                "a valid name is kept as it is"
            );
        }
    }

    #[test]
    fn a_long_refused_name_is_quoted_cut() {
        let long = format!("?{}", "a".repeat(500));
        let msg = ObjectName::checked("metadata.ownerReferences[Machine].name", &long)
            .expect_err("refused")
            .to_string();
        assert!(msg.len() < 250, "{msg}");
        assert!(msg.contains("..."), "{msg}");
    }
}
