//! The README's shell blocks as the README-install test runs them (`test/vm/real.sh readme`, `make e2e-readme`).
//!
//! A block the test runs is marked in README.md by an HTML comment (invisible on the rendered page) on the line
//! right before its opening fence:
//!
//! ````text
//! <!-- readme-test: install -->
//! ```sh
//! make release-manifests
//! ...
//! ```
//! ````
//!
//! [`block`] returns the block's text byte for byte, so the test runs what a reader copies; any change of shape
//! (the marker gone or doubled, no `sh` fence right after it, no closing fence) is an error that names what is
//! wrong, never an empty or partial block. The user's own values live in one block of their own ([`exports`]
//! lists the variables it sets), so that every other block uses them only by name and runs unchanged with the
//! test's values instead.

/// The marker comment of the block `name`.
pub fn marker(name: &str) -> String {
    format!("<!-- readme-test: {name} -->")
}

/// Why a block could not be taken out of the README.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadmeError {
    /// No line is the block's marker.
    #[error("README: no line `{marker}`: the block the test runs is gone or was renamed")]
    NoMarker {
        /// The marker looked for.
        marker: String,
    },
    /// More than one line is the marker.
    #[error("README: `{marker}` on lines {lines:?}: one block per marker")]
    DuplicateMarker {
        /// The marker.
        marker: String,
        /// The 1-based lines it is on.
        lines: Vec<usize>,
    },
    /// The marker is not followed by a `sh` fence.
    #[error("README line {line}: `{marker}` must be followed by a line ```sh, found {found:?}")]
    NoFence {
        /// The marker.
        marker: String,
        /// The 1-based line after the marker.
        line: usize,
        /// What that line holds.
        found: String,
    },
    /// The block never closes.
    #[error("README: the block after `{marker}` (line {line}) has no closing ```")]
    Unclosed {
        /// The marker.
        marker: String,
        /// The 1-based line of the marker.
        line: usize,
    },
    /// The block is empty.
    #[error("README: the block after `{marker}` (line {line}) is empty")]
    Empty {
        /// The marker.
        marker: String,
        /// The 1-based line of the marker.
        line: usize,
    },
}

/// The text of the block marked `name` in `readme`: every line between the fences, each ending in `\n`.
pub fn block(readme: &str, name: &str) -> Result<String, ReadmeError> {
    let marker = marker(name);
    let lines: Vec<&str> = readme.lines().collect();
    let at: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_end() == marker)
        .map(|(i, _)| i)
        .collect();
    let start = match at.as_slice() {
        [] => return Err(ReadmeError::NoMarker { marker }),
        [one] => *one,
        many => {
            return Err(ReadmeError::DuplicateMarker {
                marker,
                lines: many.iter().map(|i| i + 1).collect(),
            });
        }
    };
    let fence = lines.get(start + 1).copied().unwrap_or("");
    if fence.trim_end() != "```sh" {
        return Err(ReadmeError::NoFence {
            marker,
            line: start + 2,
            found: fence.to_owned(),
        });
    }
    let body = &lines[start + 2..];
    let Some(end) = body.iter().position(|l| l.trim_end() == "```") else {
        return Err(ReadmeError::Unclosed {
            marker,
            line: start + 1,
        });
    };
    if body[..end].iter().all(|l| l.trim().is_empty()) {
        return Err(ReadmeError::Empty {
            marker,
            line: start + 1,
        });
    }
    Ok(body[..end].iter().map(|l| format!("{l}\n")).collect())
}

/// The variables a block sets with `export NAME=...` (one or more per line), in order: the user's values.
pub fn exports(block: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in block.lines() {
        let Some(rest) = line.trim_start().strip_prefix("export ") else {
            continue;
        };
        // Words split on blanks outside quotes (a quoted value may hold blanks and `=`); a `#` that starts a
        // word outside quotes begins the comment.
        let mut words = vec![String::new()];
        let mut quote: Option<char> = None;
        for c in rest.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c.is_whitespace() => words.push(String::new()),
                None if c == '#' && words.last().is_some_and(String::is_empty) => break,
                None => {}
            }
            if quote.is_none() && !c.is_whitespace() {
                words.last_mut().expect("never empty").push(c);
            }
        }
        names.extend(
            words
                .iter()
                .filter_map(|w| w.split_once('='))
                .map(|(n, _)| n.to_owned())
                .filter(|n| !n.is_empty()),
        );
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# t\n\n<!-- readme-test: values -->\n```sh\nexport A=1 B='x y=z'   # a comment\nexport C=\"$HOME/k\"\n```\n\ntext\n\n<!-- readme-test: install -->\n```sh\nmake x\n  echo \"$A\"\n```\n";

    #[test]
    fn a_marked_block_comes_out_byte_for_byte() {
        assert_eq!(block(README, "install").unwrap(), "make x\n  echo \"$A\"\n");
    }

    #[test]
    fn a_missing_marker_is_an_error_naming_it() {
        let e = block(README, "cluster").unwrap_err();
        assert_eq!(
            e,
            ReadmeError::NoMarker {
                marker: "<!-- readme-test: cluster -->".into()
            }
        );
        assert!(e.to_string().contains("readme-test: cluster"));
    }

    #[test]
    fn a_doubled_marker_is_an_error_naming_both_lines() {
        let twice = format!("{README}\n<!-- readme-test: install -->\n```sh\nls\n```\n");
        assert!(matches!(
            block(&twice, "install"),
            Err(ReadmeError::DuplicateMarker { lines, .. }) if lines == vec![11, 17]
        ));
    }

    #[test]
    fn a_marker_without_an_sh_fence_right_after_it_is_an_error() {
        let other = README.replace("install -->\n```sh", "install -->\n\n```sh");
        assert!(matches!(
            block(&other, "install"),
            Err(ReadmeError::NoFence { line: 12, .. })
        ));
        let bash = README.replace("install -->\n```sh", "install -->\n```bash");
        assert!(matches!(
            block(&bash, "install"),
            Err(ReadmeError::NoFence { .. })
        ));
    }

    #[test]
    fn an_unclosed_or_empty_block_is_an_error() {
        let open = README.trim_end().trim_end_matches("```");
        assert!(matches!(
            block(open, "install"),
            Err(ReadmeError::Unclosed { line: 11, .. })
        ));
        let empty = "<!-- readme-test: x -->\n```sh\n\n```\n";
        assert!(matches!(block(empty, "x"), Err(ReadmeError::Empty { .. })));
    }

    #[test]
    fn the_values_block_lists_every_exported_name_in_order() {
        let values = block(README, "values").unwrap();
        assert_eq!(exports(&values), ["A", "B", "C"]);
        assert!(exports("make x\necho $A\n").is_empty());
    }

    #[test]
    fn the_project_readme_has_every_block_the_test_runs() {
        let readme = include_str!("../../../README.md");
        for name in ["values", "install", "cluster", "apply"] {
            block(readme, name).unwrap_or_else(|e| panic!("{e}"));
        }
        let values = block(readme, "values").unwrap();
        assert_eq!(
            exports(&values),
            ["REGISTRY", "SSH_KEY", "KUBERNETES_VERSION", "KUBEKEY_INSTANCES"]
        );
        // Only the values block sets the user's values: the others use them by name.
        for name in ["install", "cluster", "apply"] {
            let b = block(readme, name).unwrap();
            assert!(exports(&b).is_empty(), "the {name} block sets a variable");
            assert!(!b.contains("10.0.0."), "the {name} block names a host address");
        }
    }
}
