//! A CycloneDX 1.5 SBOM (JSON) of one workspace package: the package itself with its library and binary targets
//! as the subject, and every crate it links on one platform as a component, with its version, license,
//! package URL, crate checksum and dependencies.
//!
//! The input is what cargo already knows: `cargo metadata --filter-platform TRIPLE` (the packages and the
//! resolved graph, each edge with its kinds) and `Cargo.lock` (the crates.io checksums). A crate that the package
//! reaches only through dev-dependency edges (its tests' helpers) is not linked and not listed. The output is
//! reproducible: the timestamp comes from the caller (`SOURCE_DATE_EPOCH` in `make release`), the serial number
//! is derived from the content, and workspace paths are written relative to the workspace root.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::Error;

/// One `[[package]]` of Cargo.lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locked {
    /// Crate name.
    pub name: String,
    /// Version.
    pub version: String,
    /// `source`, absent for path (workspace) crates.
    pub source: Option<String>,
    /// The registry's SHA-256 of the `.crate` file, for registry crates.
    pub checksum: Option<String>,
}

/// The `[[package]]` entries of a Cargo.lock (version 3 or 4: one `key = "value"` per line).
pub fn parse_lock(text: &str) -> Vec<Locked> {
    text.split("[[package]]")
        .skip(1)
        .filter_map(|block| {
            let field = |key: &str| {
                block.lines().find_map(|l| {
                    let (k, v) = l.split_once(" = ")?;
                    (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
                })
            };
            Some(Locked {
                name: field("name")?,
                version: field("version")?,
                source: field("source"),
                checksum: field("checksum"),
            })
        })
        .collect()
}

const CRATES_IO: [&str; 2] = [
    "registry+https://github.com/rust-lang/crates.io-index",
    "sparse+https://index.crates.io/",
];

/// A purl qualifier value: percent-encoded but for the characters a URL keeps readable.
fn qualifier(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b'~' | b'/' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The package URL of a crate: crates.io's plain, another registry's or a git source's as a qualifier, a path
/// crate's directory relative to the workspace root.
fn purl(name: &str, version: &str, source: Option<&str>, rel_dir: &str) -> String {
    let base = format!("pkg:cargo/{name}@{version}");
    match source {
        Some(s) if CRATES_IO.contains(&s) => base,
        Some(s) if s.starts_with("git+") => format!("{base}?vcs_url={}", qualifier(s)),
        Some(s) => format!(
            "{base}?repository_url={}",
            qualifier(s.split_once('+').map_or(s, |(_, url)| url))
        ),
        None => format!("{base}?download_url={}", qualifier(&format!("file://{rel_dir}"))),
    }
}

/// `seconds` since the Unix epoch as RFC 3339 UTC (`2026-11-27T10:00:00Z`).
pub fn rfc3339(seconds: u64) -> String {
    let (days, rem) = (seconds / 86_400, seconds % 86_400);
    // Days to a civil date (proleptic Gregorian), counting eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn str_of<'a>(v: &'a Value, key: &str) -> Result<&'a str, Error> {
    v[key]
        .as_str()
        .ok_or_else(|| Error::Metadata(format!("no string {key}")))
}

/// What the SBOM says about who made it.
#[derive(Clone, Copy, Debug)]
pub struct Tool<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// Its version.
    pub version: &'a str,
}

/// The SBOM of workspace package `package` from `cargo metadata`'s JSON (`metadata`, taken with
/// `--filter-platform`) and Cargo.lock's entries, timestamped `epoch` (seconds).
pub fn sbom(
    metadata: &Value,
    lock: &[Locked],
    package: &str,
    epoch: u64,
    tool: Tool<'_>,
) -> Result<Value, Error> {
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .ok_or_else(|| Error::Metadata("no packages".into()))?
        .iter()
        .map(|p| Ok((str_of(p, "id")?, p)))
        .collect::<Result<_, Error>>()?;
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .ok_or_else(|| Error::Metadata("no resolve.nodes (was --no-deps given?)".into()))?
        .iter()
        .map(|n| Ok((str_of(n, "id")?, n)))
        .collect::<Result<_, Error>>()?;
    let root_dir = str_of(metadata, "workspace_root")?;
    let root_id = metadata["workspace_members"]
        .as_array()
        .ok_or_else(|| Error::Metadata("no workspace_members".into()))?
        .iter()
        .filter_map(Value::as_str)
        .find(|id| packages.get(id).is_some_and(|p| p["name"] == package))
        .ok_or_else(|| Error::NotAMember(package.to_string()))?;

    // The linked closure: edges that are normal or build dependencies of at least one kind.
    let linked = |dep: &Value| {
        dep["dep_kinds"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k["kind"] != "dev"))
    };
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut seen = BTreeSet::from([root_id]);
    let mut queue = VecDeque::from([root_id]);
    while let Some(id) = queue.pop_front() {
        let node = nodes
            .get(id)
            .ok_or_else(|| Error::Metadata(format!("{id} is not in the resolve graph")))?;
        let deps: Vec<&str> = node["deps"]
            .as_array()
            .map(|deps| {
                deps.iter()
                    .filter(|d| linked(d))
                    .filter_map(|d| d["pkg"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        for &d in &deps {
            if seen.insert(d) {
                queue.push_back(d);
            }
        }
        edges.insert(id, deps);
    }

    // Each package's purl is its bom-ref: unique per crate, and free of this checkout's absolute paths.
    let mut refs: BTreeMap<&str, String> = BTreeMap::new();
    let mut components = Vec::new();
    let mut subject = Value::Null;
    for &id in &seen {
        let p = packages
            .get(id)
            .ok_or_else(|| Error::Metadata(format!("{id} is not in packages")))?;
        let (name, version) = (str_of(p, "name")?, str_of(p, "version")?);
        let source = p["source"].as_str();
        let dir = str_of(p, "manifest_path")?
            .trim_end_matches("Cargo.toml")
            .trim_end_matches('/');
        let rel = dir.strip_prefix(root_dir).unwrap_or(dir).trim_start_matches('/');
        let purl = purl(name, version, source, if rel.is_empty() { "." } else { rel });
        let mut c = json!({
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
        });
        if let Some(d) = p["description"].as_str() {
            c["description"] = json!(d.trim());
        }
        if let Some(l) = p["license"].as_str() {
            // Cargo's old `A/B` spelling is SPDX's `A OR B`.
            c["licenses"] = json!([{ "expression": l.replace('/', " OR ") }]);
        }
        let locked = lock
            .iter()
            .find(|l| l.name == name && l.version == version && l.source.as_deref() == source)
            .ok_or_else(|| Error::NotLocked(format!("{name} {version}")))?;
        if let Some(sum) = &locked.checksum {
            c["hashes"] = json!([{ "alg": "SHA-256", "content": sum }]);
        }
        let refs_of = [
            ("repository", "vcs"),
            ("homepage", "website"),
            ("documentation", "documentation"),
        ];
        let external: Vec<Value> = refs_of
            .iter()
            .filter_map(|(key, kind)| Some(json!({ "type": kind, "url": p[*key].as_str()? })))
            .collect();
        if !external.is_empty() {
            c["externalReferences"] = json!(external);
        }
        refs.insert(id, purl.clone());
        if id == root_id {
            c["type"] = json!("application");
            let targets: Vec<Value> = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| {
                    let kind = t["kind"].as_array()?;
                    let kind = if kind.iter().any(|k| k == "bin") {
                        "application"
                    } else if kind.iter().any(|k| k == "lib") {
                        "library"
                    } else {
                        return None;
                    };
                    let tname = t["name"].as_str()?;
                    Some(json!({
                        "type": kind,
                        "bom-ref": format!("{purl}#target-{tname}"),
                        "name": tname,
                        "version": version,
                    }))
                })
                .collect();
            c["components"] = json!(targets);
            subject = c;
        } else {
            c["scope"] = json!("required");
            components.push(c);
        }
    }
    components.sort_by(|a, b| a["bom-ref"].as_str().cmp(&b["bom-ref"].as_str()));
    let mut dependencies: Vec<Value> = edges
        .iter()
        .map(|(id, deps)| {
            let mut on: Vec<&str> = deps.iter().map(|d| refs[d].as_str()).collect();
            on.sort_unstable();
            on.dedup();
            json!({ "ref": refs[id], "dependsOn": on })
        })
        .collect();
    dependencies.sort_by(|a, b| a["ref"].as_str().cmp(&b["ref"].as_str()));

    // The serial number names this content: a version-8 (custom) UUID from its SHA-256.
    let digest = Sha256::digest(serde_json::to_vec(&json!([subject, components])).unwrap_or_default());
    let mut u = [0u8; 16];
    u.copy_from_slice(&digest[..16]);
    u[6] = (u[6] & 0x0f) | 0x80;
    u[8] = (u[8] & 0x3f) | 0x80;
    let h = hex::encode(u);
    let serial = format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    );

    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial,
        "version": 1,
        "metadata": {
            "timestamp": rfc3339(epoch),
            "tools": { "components": [{ "type": "application", "name": tool.name, "version": tool.version }] },
            "component": subject,
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRATES: &str = "registry+https://github.com/rust-lang/crates.io-index";

    fn pkg(name: &str, version: &str, source: Option<&str>, dir: &str, targets: Value) -> Value {
        let id = match source {
            Some(s) => format!("{s}#{name}@{version}"),
            None => format!("path+file://{dir}#{name}@{version}"),
        };
        json!({
            "id": id, "name": name, "version": version, "source": source, "license": "MIT/Apache-2.0",
            "description": format!("{name} crate "), "repository": format!("https://example.org/{name}"),
            "manifest_path": format!("{dir}/Cargo.toml"), "targets": targets,
        })
    }

    fn dep(id: &Value, kinds: &[Option<&str>]) -> Value {
        let kinds: Vec<Value> = kinds
            .iter()
            .map(|k| json!({ "kind": k, "target": null }))
            .collect();
        json!({ "pkg": id["id"], "dep_kinds": kinds })
    }

    /// app -> lib (path) -> serde (crates.io); app -> cc (build); app -dev-> testkit -> rand; lib -dev-> rand.
    fn workspace() -> (Value, Vec<Locked>) {
        let app = pkg(
            "app",
            "0.1.0",
            None,
            "/ws/app",
            json!([{ "kind": ["lib"], "name": "app" }, { "kind": ["bin"], "name": "manager" },
                   { "kind": ["test"], "name": "it" }]),
        );
        let lib = pkg("lib", "0.1.0", None, "/ws/lib", json!([]));
        let serde = pkg("serde", "1.0.1", Some(CRATES), "/reg/serde-1.0.1", json!([]));
        let cc = pkg("cc", "1.2.0", Some(CRATES), "/reg/cc-1.2.0", json!([]));
        let testkit = pkg("testkit", "0.1.0", None, "/ws/testkit", json!([]));
        let rand = pkg("rand", "0.9.0", Some(CRATES), "/reg/rand-0.9.0", json!([]));
        let node = |p: &Value, deps: Vec<Value>| json!({ "id": p["id"], "deps": deps });
        let meta = json!({
            "workspace_root": "/ws",
            "workspace_members": [app["id"], lib["id"], testkit["id"]],
            "packages": [app, lib, serde, cc, testkit, rand],
            "resolve": { "nodes": [
                node(&app, vec![dep(&lib, &[None]), dep(&cc, &[Some("build")]), dep(&testkit, &[Some("dev")])]),
                node(&lib, vec![dep(&serde, &[None]), dep(&rand, &[Some("dev")])]),
                node(&serde, vec![]), node(&cc, vec![]), node(&testkit, vec![dep(&rand, &[None])]), node(&rand, vec![]),
            ]},
        });
        let lock = parse_lock(&format!(
            "version = 4\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\ndependencies = [\n \"lib\",\n]\n\n\
             [[package]]\nname = \"lib\"\nversion = \"0.1.0\"\n\n\
             [[package]]\nname = \"serde\"\nversion = \"1.0.1\"\nsource = \"{CRATES}\"\nchecksum = \"{}\"\n\n\
             [[package]]\nname = \"cc\"\nversion = \"1.2.0\"\nsource = \"{CRATES}\"\nchecksum = \"{}\"\n",
            "a".repeat(64),
            "b".repeat(64)
        ));
        (meta, lock)
    }

    const TOOL: Tool<'static> = Tool {
        name: "cyclonedx-sbom",
        version: "0.1.0",
    };

    #[test]
    fn cargo_lock_entries_carry_name_version_source_and_checksum() {
        let (_, lock) = workspace();
        assert_eq!(lock.len(), 4);
        assert_eq!(
            lock[0],
            Locked {
                name: "app".into(),
                version: "0.1.0".into(),
                source: None,
                checksum: None
            }
        );
        assert_eq!(lock[2].source.as_deref(), Some(CRATES));
        assert_eq!(lock[2].checksum.as_deref(), Some("a".repeat(64).as_str()));
    }

    #[test]
    fn the_subject_is_the_package_with_its_binary_and_library_targets_but_not_its_tests() {
        let (meta, lock) = workspace();
        let bom = sbom(&meta, &lock, "app", 0, TOOL).unwrap();
        assert_eq!(bom["bomFormat"], "CycloneDX");
        assert_eq!(bom["specVersion"], "1.5");
        let subject = &bom["metadata"]["component"];
        assert_eq!(subject["name"], "app");
        assert_eq!(subject["type"], "application");
        assert_eq!(subject["purl"], "pkg:cargo/app@0.1.0?download_url=file://app");
        let targets: Vec<(&str, &str)> = subject["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t["type"].as_str().unwrap()))
            .collect();
        assert_eq!(targets, vec![("app", "library"), ("manager", "application")]);
        assert_eq!(bom["metadata"]["timestamp"], "1970-01-01T00:00:00Z");
        assert_eq!(
            bom["metadata"]["tools"]["components"][0]["name"],
            "cyclonedx-sbom"
        );
    }

    #[test]
    fn components_are_what_the_package_links_with_versions_licenses_purls_and_checksums() {
        let (meta, lock) = workspace();
        let bom = sbom(&meta, &lock, "app", 0, TOOL).unwrap();
        let names: Vec<&str> = bom["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // Sorted by purl; the build dependency is linked into the build, testkit and rand only into tests.
        assert_eq!(names, vec!["cc", "lib", "serde"]);
        let serde = &bom["components"][2];
        assert_eq!(serde["version"], "1.0.1");
        assert_eq!(serde["purl"], "pkg:cargo/serde@1.0.1");
        assert_eq!(serde["licenses"][0]["expression"], "MIT OR Apache-2.0");
        assert_eq!(
            serde["hashes"][0],
            json!({ "alg": "SHA-256", "content": "a".repeat(64) })
        );
        assert_eq!(serde["description"], "serde crate");
        assert_eq!(
            serde["externalReferences"][0],
            json!({ "type": "vcs", "url": "https://example.org/serde" })
        );
        assert_eq!(serde["scope"], "required");
        let lib = &bom["components"][1];
        assert_eq!(lib["purl"], "pkg:cargo/lib@0.1.0?download_url=file://lib");
        assert!(
            lib.get("hashes").is_none(),
            "a path crate has no registry checksum"
        );
    }

    #[test]
    fn dependencies_follow_the_linked_edges_only() {
        let (meta, lock) = workspace();
        let bom = sbom(&meta, &lock, "app", 0, TOOL).unwrap();
        let deps: BTreeMap<&str, Vec<&str>> = bom["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let on = d["dependsOn"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap())
                    .collect();
                (d["ref"].as_str().unwrap(), on)
            })
            .collect();
        assert_eq!(
            deps["pkg:cargo/app@0.1.0?download_url=file://app"],
            vec![
                "pkg:cargo/cc@1.2.0",
                "pkg:cargo/lib@0.1.0?download_url=file://lib"
            ]
        );
        assert_eq!(
            deps["pkg:cargo/lib@0.1.0?download_url=file://lib"],
            vec!["pkg:cargo/serde@1.0.1"]
        );
        assert_eq!(deps.len(), 4);
    }

    #[test]
    fn the_same_input_gives_the_same_sbom_and_another_input_another_serial_number() {
        let (meta, lock) = workspace();
        let a = sbom(&meta, &lock, "app", 1_764_201_600, TOOL).unwrap();
        assert_eq!(a, sbom(&meta, &lock, "app", 1_764_201_600, TOOL).unwrap());
        let serial = a["serialNumber"].as_str().unwrap();
        assert!(
            serial.starts_with("urn:uuid:") && serial.len() == 45 && serial.as_bytes()[23] == b'8',
            "{serial}"
        );
        let b = sbom(&meta, &lock, "lib", 1_764_201_600, TOOL).unwrap();
        assert_ne!(serial, b["serialNumber"].as_str().unwrap());
    }

    #[test]
    fn a_package_outside_the_workspace_or_a_stale_lock_is_an_error_naming_it() {
        let (meta, lock) = workspace();
        let err = sbom(&meta, &lock, "serde", 0, TOOL).unwrap_err();
        assert_eq!(err.to_string(), "serde is not a package of the workspace");
        let stale: Vec<Locked> = lock.into_iter().filter(|l| l.name != "serde").collect();
        let err = sbom(&meta, &stale, "app", 0, TOOL).unwrap_err();
        assert!(
            err.to_string().starts_with("serde 1.0.1 is not in Cargo.lock"),
            "{err}"
        );
    }

    #[test]
    fn epoch_seconds_read_as_utc_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_764_201_600 + 3_723), "2025-11-27T01:02:03Z");
    }

    #[test]
    fn purls_name_the_source_of_crates_outside_crates_io() {
        assert_eq!(
            purl("x", "1.0.0", Some("git+https://example.org/x?rev=abc#abc"), ""),
            "pkg:cargo/x@1.0.0?vcs_url=git%2Bhttps://example.org/x%3Frev%3Dabc%23abc"
        );
        assert_eq!(
            purl("x", "1.0.0", Some("sparse+https://reg.example.org/"), ""),
            "pkg:cargo/x@1.0.0?repository_url=https://reg.example.org/"
        );
    }
}
